"""Per-user quotas on the service (`tuner.app.service.access.quotas`), in process: studies kept
(429), trainings at once (429 for a study that could never start; a queued study waits for its
owner's), bytes of run folders (507 at submit and resume), admins not limited, a user's own
limits; a report built once per change of its study, however often it is read; and
``--max-trials`` counting the trainings interrupted by a cancel."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pytest
from inprocess_service import SPEC, InProcessService, inprocess_service
from service_spec import TEAM

from tuner import testing
from tuner.app.cli import main
from tuner.app.service.access.quotas import Limits, Quotas

BRISK = "inprocess_service:brisk_train"


def submit(svc: InProcessService, user: str, name: str, *, n: int = 1,
           max_concurrent: int = 2) -> tuple[int, dict]:
    spec = SPEC.format(name=name, n=n).replace("max_concurrent = 2",
                                               f"max_concurrent = {max_concurrent}")
    return svc.call("POST", "/api/v1/studies", {"spec": spec}, token=svc.tokens[user])


def test_a_users_studies_past_the_quota_are_a_429_naming_it(tmp_path):
    quotas = Quotas(default=Limits(studies=2), users={"bob": Limits(studies=3)})
    with inprocess_service(tmp_path / "root", users=TEAM, trainer=BRISK,
                           quotas=quotas) as svc:
        assert submit(svc, "alice", "a1")[0] == 201
        assert submit(svc, "alice", "a2")[0] == 201
        status, body = submit(svc, "alice", "a3")
        assert status == 429 and body["field"] == "quota.studies", body
        assert "at most 2 studies" in body["detail"] and "--quota-studies" in body["detail"]
        assert "a3" not in svc.service.names() and not (svc.root / "a3").exists()
        for name in ("b1", "b2", "b3"):  # bob's own limit
            assert submit(svc, "bob", name)[0] == 201, name
        assert submit(svc, "bob", "b4")[0] == 429
        for name in ("o1", "o2", "o3", "o4"):  # an admin is not limited
            assert submit(svc, "ops", name)[0] == 201, name
        svc.wait_state("a1", ("finished",), token=svc.tokens["alice"])
        assert svc.call("DELETE", "/api/v1/studies/a1", token=svc.tokens["alice"])[0] == 204
        assert submit(svc, "alice", "a3")[0] == 201  # a deleted study frees its place


def test_a_users_disk_past_the_quota_is_a_507_at_submit_and_resume(tmp_path):
    # 1 byte: the first study's marked run folder passes it
    quotas = Quotas(default=Limits(disk_bytes=1))
    with inprocess_service(tmp_path / "root", users=TEAM, quotas=quotas) as svc:
        alice = svc.tokens["alice"]
        assert submit(svc, "alice", "first", n=4)[0] == 201
        status, body = submit(svc, "alice", "second")
        assert status == 507 and body["field"] == "quota.disk", body
        assert "--quota-disk-gb" in body["detail"] and "'alice'" in body["detail"]
        assert "second" not in svc.service.names()
        assert submit(svc, "bob", "bobs")[0] == 201  # another user's folders are not alice's
        svc.wait_trials_running("first", token=alice)
        assert svc.call("POST", "/api/v1/studies/first/cancel", token=alice)[0] == 200
        svc.wait_state("first", ("cancelled",), token=alice)
        status, body = svc.call("POST", "/api/v1/studies/first/resume", token=alice)
        assert status == 507 and "quota.disk" in body["detail"], body
        status, body = svc.call("POST", "/api/v1/studies/first/resume",
                                token=svc.tokens["ops"])  # an admin resuming is not limited
        assert status == 200, body


def test_the_bytes_counted_are_the_users_run_folders_links_not_followed(tmp_path):
    outside = tmp_path / "big"
    outside.mkdir()
    (outside / "blob").write_bytes(b"x" * 10_000)
    with inprocess_service(tmp_path / "root", users=TEAM) as svc:
        assert submit(svc, "alice", "mine", n=4)[0] == 201
        folder = svc.root / "mine"
        (folder / "data.bin").write_bytes(b"y" * 5_000)
        os.symlink(outside, folder / "linked")
        held = svc.service.held("alice")
        assert held.studies == 1
        assert 5_000 <= held.disk_bytes < 10_000, held
        assert svc.service.held("bob").disk_bytes == 0


def test_a_study_that_could_never_start_under_the_trainings_quota_is_a_429(tmp_path):
    with inprocess_service(tmp_path / "root", users=TEAM,
                           quotas=Quotas(default=Limits(trainings=2))) as svc:
        status, body = submit(svc, "alice", "wide", max_concurrent=3)
        assert status == 429 and body["field"] == "quota.trainings", body
        assert "--quota-trainings" in body["detail"] and "3" in body["detail"]
        assert submit(svc, "ops", "wide", max_concurrent=3)[0] == 201  # an admin


def test_a_queued_study_waits_for_its_owners_trainings_and_others_start(tmp_path):
    """alice's two studies of 2 trainings each under her quota of 2: the second waits while
    the first runs, and bob's, submitted after it, starts meanwhile."""
    with inprocess_service(tmp_path / "root", users=TEAM, max_running=3,
                           quotas=Quotas(default=Limits(trainings=2))) as svc:
        alice = svc.tokens["alice"]
        assert submit(svc, "alice", "first", n=6)[0] == 201
        svc.wait_trials_running("first", token=alice)
        assert submit(svc, "alice", "second", n=1)[0] == 201
        assert submit(svc, "bob", "bobs", n=6)[0] == 201
        svc.wait_trials_running("bobs", token=alice)
        # every pass that started bob's saw alice's older one and left it queued
        assert svc.call("GET", "/api/v1/studies/second", token=alice)[1]["state"] == "queued"
        assert svc.call("POST", "/api/v1/studies/first/cancel", token=alice)[0] == 200
        svc.wait_state("second", ("finished",), token=alice)


def test_twenty_reads_of_an_unchanged_studys_report_write_nothing(tmp_path):
    with inprocess_service(tmp_path / "root", users=TEAM, trainer=BRISK) as svc:
        alice = svc.tokens["alice"]
        assert submit(svc, "alice", "read-me", n=2)[0] == 201
        svc.wait_state("read-me", ("finished",), token=alice)
        first = svc.call("GET", "/api/v1/studies/read-me/report", token=alice)
        assert first[0] == 200
        before = _files(svc.root)
        for _ in range(20):
            assert svc.call("GET", "/api/v1/studies/read-me/report",
                            token=svc.tokens["bob"])[1] == first[1]
        assert _files(svc.root) == before


def _files(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` but the database's: (size, mtime in ns)."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*") if p.is_file() and not p.name.startswith("service.db")}


@pytest.mark.parametrize(("argv", "words"), [
    (["--user-quota", "alice:disk=1"], "--user-quota: must be USER:KIND=N"),
    (["--user-quota", "alice:studies=-1"], "--user-quota: must be USER:KIND=N"),
    (["--user-quota", "studies=3"], "--user-quota: must be USER:KIND=N"),
    (["--quota-studies", "-1"], "--quota-studies: must be >= 0"),
    (["--quota-disk-gb", "nan"], "--quota-disk-gb: must be >= 0"),
])
def test_serves_quota_flags_are_checked_before_anything_starts(tmp_path, argv, words):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["serve", "--root", str(tmp_path / "root"), "--port", "1", *argv]) == 2
    assert words in err.getvalue(), err.getvalue()
    assert not (tmp_path / "root").exists()


def test_max_trials_counts_interrupted_trainings_through_cancel_and_resume(tmp_path,
                                                                           monkeypatch):
    """A 3-trial study under --max-trials 6: cancel and resume cycles re-run the interrupted
    trials, and the trainer is called at most 6 times in all (it was called 12 times in 5
    cycles); the resume that could pass the cap is a 429 naming it."""
    calls = []

    def counted(*args, **kw):
        calls.append(1)
        return testing.slow_train(*args, **kw)

    monkeypatch.setattr(testing, "counted_train", counted, raising=False)
    with inprocess_service(tmp_path / "root", trainer="tuner.testing:counted_train",
                           max_trials=6) as svc:
        assert svc.call("POST", "/api/v1/studies", {"spec": SPEC.format(name="cyc", n=3)})[0] \
            == 201
        refused = None
        for _ in range(5):
            svc.wait_trials_running("cyc")
            assert svc.call("POST", "/api/v1/studies/cyc/cancel")[0] == 200
            svc.wait_state("cyc", ("cancelled", "finished"))
            status, body = svc.call("POST", "/api/v1/studies/cyc/resume")
            if status != 200:
                refused = (status, body)
                break
        assert refused is not None and refused[0] == 429, refused
        assert "--max-trials" in refused[1]["detail"] and "interrupted" in refused[1]["detail"]
        assert len(calls) <= 6, len(calls)
