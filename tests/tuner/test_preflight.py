"""The preflight does each check once per process: one spec parse (two for ``submit --resume``,
the file's and the stored one it is compared with), one input check, one storage open, the
resume rules and the lease once, for the CLI, the service's submit and its driver."""

from __future__ import annotations

from pathlib import Path

import pytest
from call_counter import counting
from test_tuner_resume import QT, SPEC  # the two-trial random-search spec of the resume tests

from tuner.app.cli import main
from tuner.app.requests.studies import service_record, set_state
from tuner.app.requests.submit import SubmitRequest
from tuner.app.service.access.tokens import User
from tuner.app.service.context import Service, ServiceConfig, SubmitError
from tuner.app.service.running import driver
from tuner.study.run.preflight import prepare
from tuner.study.specs.spec import load_spec
from tuner.study.store import database as db
from tuner.study.store import lease as ls
from tuner.study.store import storage as st


def _spec(tmp_path: Path, n: int) -> Path:
    path = tmp_path / f"rnd{n}.toml"
    path.write_text(SPEC.format(n=n))
    return path


def _seen(counts, *keys: str) -> dict[str, int]:
    return {k: counts[k] for k in keys}


KEYS = ("spec parses", "input checks", "storage opens", "resume-rule checks", "lease calls")


def test_cli_submit_resume_and_resume_check_each_thing_once(ray_session, tmp_path):
    root = str(tmp_path / "runs")
    with counting() as c:
        assert main(["submit", str(_spec(tmp_path, 2)), "--root", root, *QT]) == 0
    assert _seen(c, *KEYS) == {"spec parses": 1, "input checks": 1, "storage opens": 1,
                               "resume-rule checks": 0, "lease calls": 1}
    with counting() as c:
        assert main(["submit", str(_spec(tmp_path, 3)), "--resume", "--root", root, *QT]) == 0
    assert _seen(c, *KEYS) == {"spec parses": 2, "input checks": 1, "storage opens": 1,
                               "resume-rule checks": 1, "lease calls": 1}
    with counting() as c:
        assert main(["resume", "rnd", "--root", root, *QT]) == 0
    assert _seen(c, *KEYS) == {"spec parses": 1, "input checks": 1, "storage opens": 1,
                               "resume-rule checks": 0, "lease calls": 1}


LAW = "[law]\ntokens = [300, 1_000, 3_000, 10_000]\ntrials = 2\n"  # as count_checks.py


def test_a_law_submit_and_its_resume_go_through_the_one_preflight(ray_session, tmp_path):
    """A law's submit is checked by the same preflight as a plain study's, for its first stage:
    `submit --resume` of the same law with more trials is accepted (the CLI's own check,
    before the one stage runner, compared the stored budget spec with the law's and refused
    it: budget.eval_every_tokens 75 vs 100), and the counts are docs/architecture.md's."""
    root = str(tmp_path / "runs")
    for n in (2, 3):
        (tmp_path / f"law{n}.toml").write_text(SPEC.format(n=n) + LAW)
    with counting() as c:
        assert main(["submit", str(tmp_path / "law2.toml"), "--root", root, *QT]) == 0
    assert _seen(c, *KEYS, "study loads") == {
        "spec parses": 5, "input checks": 1, "storage opens": 6, "resume-rule checks": 0,
        "lease calls": 4, "study loads": 3}
    with counting() as c:
        assert main(["submit", str(tmp_path / "law3.toml"), "--resume", "--root", root,
                     *QT]) == 0
    # each stored budget found once by the stage runner (its preflight and the held-out
    # predictions take it from there) and once by the law report's fit
    assert _seen(c, *KEYS, "study loads") == {
        "spec parses": 9, "input checks": 1, "storage opens": 2, "resume-rule checks": 5,
        "lease calls": 5, "study loads": 7}


def test_the_plan_holds_the_lease_until_it_closes(tmp_path):
    run_dir = tmp_path / "runs" / "rnd"
    spec = load_spec(_spec(tmp_path, 2))
    run_dir.mkdir(parents=True)
    store = db.open_storage(db.storage_url(run_dir))
    st.create_study(spec, store)
    with prepare(spec, run_dir=run_dir, resume=True) as plan:
        assert plan.resume and plan.stored is not None
        with pytest.raises(ls.LeaseHeld):
            prepare(spec, run_dir=run_dir, resume=True)
    ls.check_free(store.engine, "rnd")  # released on leaving the block
    with pytest.raises(FileExistsError, match="--resume"):
        prepare(spec, run_dir=run_dir)


class _NoScheduler:
    def wake(self) -> None:
        pass


def test_service_submit_and_driver_check_each_thing_once(ray_session, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    url = f"sqlite:///{root / 'service.db'}"
    storage = db.open_storage(url)
    service = Service(ServiceConfig(root=root, storage_url=url,
                                    trainer="tuner.testing:quick_train"),
                      storage, None, _NoScheduler())  # type: ignore[arg-type]
    with counting() as c:
        ann = User(name="ann", admin=False)
        assert service.submit(SubmitRequest(spec=SPEC.format(n=2)), ann) == "rnd"
    assert _seen(c, "spec parses", "input checks", "samplers built") == {
        "spec parses": 1, "input checks": 1, "samplers built": 0}
    with pytest.raises(SubmitError) as e:  # a second one of the name: refused, field named
        service.submit(SubmitRequest(spec=SPEC.format(n=2)), User(name="ann", admin=False))
    assert e.value.field == "study.name"
    set_state(st.load_study("rnd", storage), "starting")
    with counting() as c:
        assert driver.run_driver("rnd", url, str(root), "tuner.testing:quick_train") == "finished"
    assert _seen(c, "spec parses", "input checks", "storage opens", "resume-rule checks",
                 "study loads") == {"spec parses": 1, "input checks": 1, "storage opens": 1,
                                    "resume-rule checks": 0, "study loads": 1}
    assert service_record(st.load_study("rnd", storage))["state"] == "finished"
