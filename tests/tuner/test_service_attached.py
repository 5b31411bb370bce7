"""The command line's studies under the service's root: listed, shown and reported by the
service, never changed by it."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest
from fastapi import HTTPException

from tuner.app.requests.actions import CancelRequest, DeleteRequest, ExportRequest, ResumeRequest
from tuner.app.service.access.tokens import User
from tuner.app.service.context import Service, ServiceConfig
from tuner.study.store import database as db

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reports"))
from synthetic_studies import add, new_study  # noqa: E402

ADMIN = User(name="root", admin=True)


class _NoScheduler:
    def wake(self) -> None:
        pass


def _files(folder: Path) -> dict[str, str]:
    """Every file's hash, but sqlite's shared-memory index of the write-ahead log and an empty
    write-ahead log (a reader of a database in WAL mode makes or updates them: they hold no
    data)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.name.endswith("-shm")
            and not (p.name.endswith("-wal") and p.stat().st_size == 0)}


@pytest.fixture
def service_with_a_cli_study(tmp_path):
    root = tmp_path / "root"
    cli = root / "from-cli"
    cli.mkdir(parents=True)
    writer = db.open_storage(db.storage_url(cli))
    study = new_study("from-cli", storage=writer)
    add(study, values=[3.0, 1.0], trained=True)
    add(study, values=[3.2, 0.5], trained=True)
    # the command line has exited: its connections closed (sqlite checkpoints its write-ahead
    # log into study.db then), not whenever the garbage collector gets to them mid-test, which
    # would change the folder the test asserts the service leaves alone
    writer.engine.dispose()
    (root / "odd name").mkdir()  # not a study name: never looked at
    (root / "odd name" / "study.db").write_text("not a database")
    (root / "junk").mkdir()
    (root / "junk" / "study.db").write_text("not a database either")
    url = f"sqlite:///{root / 'service.db'}"
    service = Service(ServiceConfig(root=root, storage_url=url), db.open_storage(url), None,
                      _NoScheduler())  # type: ignore[arg-type]
    return service, root


def test_a_cli_study_is_listed_and_shown_read_only(service_with_a_cli_study):
    service, root = service_with_a_cli_study
    before = _files(root / "from-cli")
    assert service.names() == ["from-cli"]
    (summary,) = service.summaries()
    assert summary["name"] == "from-cli" and summary["state"] == "external"
    assert len(service.view("from-cli", "detail")["trials"]) == 2
    for act in (lambda s: service.cancel(CancelRequest(study="from-cli", by="root"), ADMIN),
                lambda s: service.delete(DeleteRequest(study="from-cli"), ADMIN),
                lambda s: service.resume(ResumeRequest(study="from-cli"), ADMIN)):
        with pytest.raises(HTTPException) as e:
            act(None)
        assert e.value.status_code == 409 and "not run by this service" in e.value.detail
    report = service.report(service.study("from-cli"))
    assert report.is_file() and root / ".attached-reports" in report.parents
    body, name, _ = service.export(ExportRequest.from_options("from-cli", {
        "pick": ["knee"], "target": "deepseek-v3-671b", "gpus": 2048, "tokens": 14.8e12}))
    assert name == "from-cli-native.json" and b'"lr"' in body
    assert _files(root / "from-cli") == before  # nothing written into the CLI's folder


def test_a_name_of_a_cli_study_is_not_a_new_name(service_with_a_cli_study):
    from tuner.app.requests.submit import SubmitRequest
    from tuner.app.service.context import SubmitError

    service, _ = service_with_a_cli_study
    with pytest.raises(SubmitError) as e:
        service.submit(SubmitRequest(spec='[study]\nname = "from-cli"\n[space.params.lr]\n'
                                      'type = "float"\nlow = 1e-4\nhigh = 1e-2\n'), ADMIN)
    assert e.value.field == "study.name"


def test_a_cli_study_attached_with_an_owner_may_be_cancelled_by_its_owner_only(tmp_path):
    """``serve --attach from-cli=alice``: alice (and an admin) may ask the command line's
    driver to stop, through the study's storage, as ``moetune cancel`` does; bob may not;
    nobody may resume or delete it here (the service did not make it)."""
    from optuna.trial import TrialState

    from tuner.study.store.control import stop_requested

    root = tmp_path / "root"
    (root / "from-cli").mkdir(parents=True)
    study = new_study("from-cli", storage=db.open_storage(db.storage_url(root / "from-cli")))
    add(study, values=[3.0, 1.0], trained=True)
    study.ask()  # a trial the command line's driver is running
    assert any(t.state == TrialState.RUNNING for t in study.trials)
    url = f"sqlite:///{root / 'service.db'}"
    service = Service(ServiceConfig(root=root, storage_url=url,
                                    attach_owners={"from-cli": "alice"}),
                      db.open_storage(url), None, _NoScheduler())  # type: ignore[arg-type]
    view = service.view("from-cli", "summary")
    assert view["owner"] == "alice" and view["state"] == "external"
    bob, alice = User(name="bob", admin=False), User(name="alice", admin=False)
    with pytest.raises(HTTPException) as e:
        service.cancel(CancelRequest(study="from-cli", by="bob"), bob)
    assert e.value.status_code == 403 and "'alice'" in e.value.detail
    assert stop_requested(study) is None
    for act in (lambda: service.resume(ResumeRequest(study="from-cli"), alice),
                lambda: service.delete(DeleteRequest(study="from-cli"), alice)):
        with pytest.raises(HTTPException) as e:
            act()
        assert e.value.status_code == 409 and "only cancel is offered here" in e.value.detail
    assert service.cancel(CancelRequest(study="from-cli", by="alice"), alice) == "stopping"
    assert stop_requested(study)["by"] == "alice"  # what the command line's driver polls
    assert (root / "from-cli" / "study.db").is_file()


def test_attach_values_are_checked(capsys):
    from tuner.app.cli import main

    for value, rule in (("from-cli", "must be STUDY=OWNER"), ("bad name!=alice",
                        "must be STUDY=OWNER"), ("from-cli=", "must be STUDY=OWNER")):
        assert main(["serve", "--attach", value, "--port", "1"]) == 2
        err = capsys.readouterr().err
        assert "--attach" in err and rule in err and repr(value) in err, err
    assert main(["serve", "--attach", "a=x", "--attach", "a=y", "--port", "1"]) == 2
    assert "named twice" in capsys.readouterr().err
