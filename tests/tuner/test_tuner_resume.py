"""Resuming a study: no proposal is repeated, the spec may only change safely, errors leave no
RUNNING trial, and bad cluster/storage input is refused before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tuner.app.cli import main
from tuner.study.specs.spec import spec_from_dict
from tuner.study.store import database as db
from tuner.study.store import records
from tuner.study.store import storage as st
from tuner.study.trial.samplers import make_sampler
from tuner.study.trial.searcher import StudySearcher
from tuner.study.trial.trainable import FINAL_KEY

QT = ["--trainer", "tuner.testing:quick_train", "--no-progress"]
SPEC = """
[study]
name = "rnd"
n_trials = {n}
max_concurrent = 1
sampler = "random"
[budget]
tokens_per_trial = 300
eval_every_tokens = 100
[pruning]
scheduler = "none"
[space.params.lr]
type = "float"
low = 1e-4
high = 1e-2
log = true
"""


def spec_file(tmp_path: Path, extra: str = "", n: int = 3, name: str = "rnd.toml") -> Path:
    p = tmp_path / name
    p.write_text(SPEC.format(n=n) + extra)
    return p


def stored_study(root: Path, n: int = 3) -> optuna.Study:
    """A study 'rnd' with ``n`` complete trials, written through the storage API (no Ray)."""
    spec = spec_from_dict(_toml(SPEC.format(n=n)))
    run_dir = root / "rnd"
    run_dir.mkdir(parents=True)
    (run_dir / "spec.json").write_text(json.dumps(spec.to_dict()))
    study = st.create_study(spec, db.open_storage(db.storage_url(run_dir)), make_sampler(spec))
    for i in range(n):
        t = study.ask()
        spec.space.suggest(t)
        t.set_user_attr(records.OUTCOME, "complete")
        study.tell(t, [3.0 - i / 10])
    return study


def _toml(text: str) -> dict:
    import tomllib

    return tomllib.loads(text)


def test_resume_with_more_trials_never_repeats_a_config(ray_session, tmp_path, capsys):
    root = tmp_path / "runs"
    assert main(["submit", str(spec_file(tmp_path)), "--root", str(root), *QT]) == 0
    assert main(["submit", str(spec_file(tmp_path, n=6)), "--resume", "--root", str(root),
                 *QT]) == 0
    study = optuna.load_study(study_name="rnd", storage=db.storage_url(root / "rnd"))
    lrs = [t.params["lr"] for t in study.trials]
    assert len(lrs) == 6 and len(set(lrs)) == 6, lrs
    assert st.stored_spec(study).study.n_trials == 6  # status and a later resume see 6
    assert json.loads((root / "rnd" / "spec.json").read_text())["study"]["n_trials"] == 6
    capsys.readouterr()
    assert main(["status", "--root", str(root)]) == 0
    assert "6/6" in capsys.readouterr().out


@pytest.mark.parametrize(("n", "extra", "words"), [
    (6, '[objectives]\nval_loss = "minimize"\ntokens_per_s = "maximize"\n',
     ["objectives.tokens_per_s", "stored (unset)", "new 'maximize'"]),
    (2, "", ["study.n_trials", "stored 3, new 2", "only upwards"]),
    (3, "", []),  # no words: the budget row, built below
])
def test_resume_refuses_a_changed_spec_and_writes_nothing(tmp_path, capsys, n, extra, words):
    root = tmp_path / "runs"
    study = stored_study(root)
    text = SPEC.format(n=n) + extra
    if not words:  # the budget decides what a trial measures, so it may not change either
        text = SPEC.format(n=n).replace("tokens_per_trial = 300", "tokens_per_trial = 600")
        words = ["budget.tokens_per_trial", "stored 300, new 600"]
    before = (root / "rnd" / "spec.json").read_text()
    (tmp_path / "x.toml").write_text(text)
    rc = main(["submit", str(tmp_path / "x.toml"), "--resume", "--root", str(root), *QT])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    for w in words:
        assert w in err, err
    assert (root / "rnd" / "spec.json").read_text() == before
    assert st.stored_spec(study).study.n_trials == 3 and len(study.trials) == 3


def test_resume_of_a_stored_spec_that_no_longer_validates_exits_2(tmp_path, capsys):
    root = tmp_path / "runs"
    study = stored_study(root)
    bad = dict(study.user_attrs[records.SPEC])
    bad["study"] = {**bad["study"], "n_trials": 0}
    study.set_user_attr(records.SPEC, bad)
    assert main(["resume", "rnd", "--root", str(root), *QT]) == 2
    err = capsys.readouterr().err
    assert "no longer validates" in err and "study.n_trials" in err


def test_an_error_while_scoring_a_trial_leaves_it_failed_not_running(tmp_path):
    from trainers import preset

    spec = spec_from_dict(_toml(SPEC.format(n=3)))
    (tmp_path / "rnd").mkdir()
    study = st.create_study(spec, db.open_storage(db.storage_url(tmp_path / "rnd")),
                            make_sampler(spec))
    searcher = StudySearcher(study=study, spec=spec, model_args=preset("debug"), n_to_run=3)
    searcher.suggest("a")
    with pytest.raises(ValueError):
        searcher.on_trial_complete("a", {FINAL_KEY: "not json"})
    (t,) = study.get_trials()
    assert t.state == TrialState.FAIL
    assert t.user_attrs[records.REASON].startswith("the driver could not score the trial")
    assert searcher.tally.running == 0


def test_a_gpu_trial_on_a_cluster_without_gpus_exits_2_writing_nothing(ray_session, tmp_path,
                                                                        capsys):
    root = tmp_path / "runs"
    spec = spec_file(tmp_path, "[resources]\ngpus_per_trial = 1\n")
    assert main(["submit", str(spec), "--root", str(root), *QT]) == 2
    err = capsys.readouterr().err
    assert "gpus_per_trial = 1" in err and "0 GPUs" in err
    assert not root.exists()


def test_no_cluster_at_address_exits_2_writing_nothing(tmp_path, capsys, monkeypatch):
    """`--address auto` with no cluster: a clear error, and nothing written, so a retry without
    it is not refused as "already exists". Ray is stubbed: `auto` would find the test
    session's own Ray, and an unreachable host makes Ray wait minutes before it gives up."""
    import ray

    def no_cluster(*a, **kw):
        raise ConnectionError("Could not find any running Ray instance.")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", no_cluster)
    root = tmp_path / "runs"
    rc = main(["submit", str(spec_file(tmp_path)), "--address", "auto", "--root", str(root),
               *QT])
    assert rc == 2
    assert "--address auto: cannot connect to a Ray cluster" in capsys.readouterr().err
    assert not root.exists()


@pytest.mark.parametrize("argv", [
    ["submit", "SPEC", "--storage", "foo://bar"],
    ["status", "--storage", "runs/x.db"],
    ["list", "--storage", "nope"],
])
def test_a_bad_storage_flag_exits_2_naming_it(tmp_path, capsys, argv):
    argv = [str(spec_file(tmp_path)) if a == "SPEC" else a for a in argv]
    assert main([*argv, "--root", str(tmp_path / "runs"), *QT[:2] * (argv[0] == "submit")]) == 2
    err = capsys.readouterr().err
    assert "--storage" in err and "database URL" in err and argv[-1] in err
    assert not (tmp_path / "runs").exists()


def test_read_only_commands_never_create_a_database(tmp_path, capsys):
    typo = tmp_path / "typo.db"
    for argv in (["list"], ["status"], ["status", "rnd"], ["resume", "rnd", *QT]):
        assert main([*argv, "--storage", f"sqlite:///{typo}"]) == 2
        assert "no database at" in capsys.readouterr().err
        assert not typo.exists()
    other = tmp_path / "other.db"  # some sqlite file that is not a study database
    import sqlite3

    with sqlite3.connect(other) as con:
        con.execute("CREATE TABLE t (x)")
    size = other.stat().st_size
    assert main(["list", "--storage", f"sqlite:///{other}"]) == 2
    assert "not a moetune study database" in capsys.readouterr().err
    assert other.stat().st_size == size


def test_empty_name_is_refused(tmp_path, capsys):
    assert main(["submit", str(spec_file(tmp_path)), "--name", "", "--root",
                 str(tmp_path / "runs"), *QT]) == 2
    assert "--name" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_a_study_whose_every_trial_failed_exits_1_saying_why(ray_session, tmp_path, capsys):
    root = tmp_path / "runs"
    rc = main(["submit", str(spec_file(tmp_path, n=2)), "--root", str(root),
               "--trainer", "tuner.testing:error_train", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1
    assert ("all 2 trials failed; most common reason (2 of 2): "
            "ValueError: boom: the trainer hit a bug") in err


def test_ctrl_c_says_how_to_resume_with_moetune(ray_session, tmp_path, capsys, monkeypatch):
    import logging

    from tuner.study.run import runner as study_runner
    def interrupted(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(study_runner, "run", interrupted)
    rc = main(["submit", str(spec_file(tmp_path)), "--root", str(tmp_path / "runs"), *QT])
    assert rc == 130
    assert "`moetune resume rnd` continues the study" in capsys.readouterr().err
    # Ray Tune's own hint on interruption (Tuner.restore) is wrong for moetune: dropped.
    records_seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records_seen.append
    tune_logger = logging.getLogger("ray.tune.tune")
    tune_logger.addHandler(handler)
    try:
        tune_logger.warning('Resume experiment with: Tuner.restore(path="x", trainable=...)')
        tune_logger.warning("Stop signal received")
    finally:
        tune_logger.removeHandler(handler)
    assert [r.getMessage() for r in records_seen] == ["Stop signal received"]


def test_an_address_where_nothing_listens_is_refused_at_once(tmp_path, capsys, monkeypatch):
    """Ray itself would retry an unreachable HOST:PORT for about two minutes."""
    import socket

    import ray

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda *a, **kw: pytest.fail("ray.init was reached"))
    root = tmp_path / "runs"
    rc = main(["submit", str(spec_file(tmp_path)), "--address", f"127.0.0.1:{port}",
               "--root", str(root), *QT])
    assert rc == 2
    assert f"--address 127.0.0.1:{port}: nothing accepts connections there" in \
        capsys.readouterr().err
    assert not root.exists()


def test_an_address_that_is_not_host_port_is_refused(tmp_path, capsys, monkeypatch):
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    rc = main(["submit", str(spec_file(tmp_path)), "--address", "headnode",
               "--root", str(tmp_path / "runs"), *QT])
    assert rc == 2 and "--address: must be HOST:PORT" in capsys.readouterr().err


def _live_searcher(tmp_path, on_change):
    """A three-trial study and its searcher, driven by hand as Ray Tune would drive it."""
    from trainers import preset

    spec = spec_from_dict(_toml(SPEC.format(n=3)))
    (tmp_path / "rnd").mkdir()
    study = st.create_study(spec, db.open_storage(db.storage_url(tmp_path / "rnd")),
                            make_sampler(spec))
    return study, StudySearcher(study=study, spec=spec, model_args=preset("debug"),
                                n_to_run=3, on_change=on_change)


def test_a_running_trials_curve_is_stored_at_each_evaluation(tmp_path):
    """The service's study page draws running trials: their curve is in the storage before
    they end (`tuner.app.requests.studies.detail` reads it)."""
    from tuner.app.requests.studies import detail
    from tuner.study.trial.trainable import METRIC, TIME_ATTR

    seen: list = []
    study, searcher = _live_searcher(tmp_path, lambda t: seen.append(t.in_flight))
    searcher.suggest("a")
    searcher.on_trial_result("a", {TIME_ATTR: 100, METRIC: 5.5})
    searcher.on_trial_result("a", {TIME_ATTR: 200, METRIC: 5.25})
    (t,) = detail(study)["trials"]
    assert t["outcome"] == "running" and t["curve"] == [[100, 5.5], [200, 5.25]]
    # the progress display moves within the trial: a third, then two thirds of its 300 tokens
    assert seen[-2:] == pytest.approx([1 / 3, 2 / 3])
    searcher.abandon_live()
    assert searcher.tally.in_flight == 0


def test_the_progress_bar_says_which_running_trials_are_timing(tmp_path):
    """A trial that times its systems signature first (the cores held: every other trial
    waits) says so before it trains; the bar shows it, and the report is no evaluation."""
    from tuner.study.trial.progress import StudyProgress
    from tuner.study.trial.trainable import METRIC, PHASE_KEY, TIME_ATTR

    seen: list = []
    study, searcher = _live_searcher(tmp_path, lambda t: seen.append(t.timing))
    searcher.suggest("a")
    searcher.suggest("b")
    searcher.on_trial_result("a", {PHASE_KEY: "timing", METRIC: float("inf")})
    assert seen[-1] == 1
    bar = StudyProgress(name="rnd", total=3, already_done=0)
    bar(searcher.tally)
    assert "running=2 (timing=1)" in str(bar._bar.postfix)
    bar.close()
    searcher.on_trial_result("a", {TIME_ATTR: 100, METRIC: 5.5})  # timed; now it trains
    assert seen[-1] == 0
    assert [t.user_attrs.get(records.EVAL_CURVE) for t in study.trials][0] == [[100, 5.5]]
    searcher.abandon_live()
