"""A service whose storage fails mid-study: PostgreSQL stopped and started again, and the root's
disk full then freed. While the storage is down every answer is JSON (a 503 naming the storage,
never the URL); afterwards no study is stuck: the one that lost its storage ended (failed,
``storage unreachable``) or carried on, a resume finishes it with every trial kept and none
left RUNNING, and its slot is free (``--max-running 1``: the next study runs)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from service_process import SPEC, Server

from tests.tuner.conftest import CANARY
from tuner.study.store.database import open_storage

N = 6
OUTAGE_S = 8.0  # longer than a trial (3 s): some trial ends while the storage is down


def probe_while_down(srv: Server, seconds: float) -> list[tuple[int, object]]:
    """Every answer to the list, a study and a submit while the fault lasts."""
    seen = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for method, path, body in (("GET", "/api/v1/studies", None),
                                   ("GET", "/api/v1/studies/victim", None),
                                   ("POST", "/api/v1/studies",
                                    {"spec": SPEC.format(name="during", n=1)})):
            seen.append(srv.call(method, path, body))
        time.sleep(1.0)
    return seen


def finish_after_fault(srv: Server, storage_url: str) -> dict:
    """The study after the fault: ended or carried on, never stuck; resumed if it failed."""
    d = srv.wait_state("victim", ("finished", "failed", "cancelled", "interrupted"),
                       timeout_s=240)
    print(f"after the fault: {d['state']} {d['error']!r}")  # which way it went (pytest -s)
    if d["state"] != "finished":
        assert d["state"] == "failed" and d["error"].startswith("storage unreachable"), d
        status, body = srv.call("POST", "/api/v1/studies/victim/resume")
        assert status == 200, body
        d = srv.wait_state("victim", ("finished",), timeout_s=240)
    storage = open_storage(storage_url)
    trials = optuna.load_study(study_name="victim", storage=storage).trials
    assert [t.number for t in trials if t.state == TrialState.RUNNING] == []
    assert sum(t.state == TrialState.COMPLETE for t in trials) == N == d["progress"]["done"]
    return d


def check_answers(seen: list[tuple[int, object]]) -> None:
    print(f"answers during the fault: {sorted(s for s, _ in seen)}")  # pytest -s
    assert seen and all(isinstance(body, (dict, list)) for _, body in seen), seen  # all JSON
    assert {s for s, _ in seen} <= {200, 201, 503}, {s for s, _ in seen}
    for status, body in seen:
        if status == 503:
            assert isinstance(body, dict) and body["detail"].startswith("storage:")
            assert CANARY not in str(body) and "postgresql" not in str(body)


def the_next_study_runs(srv: Server) -> None:
    status, body = srv.call("POST", "/api/v1/studies", {"spec": SPEC.format(name="next", n=2)})
    assert status == 201, body
    srv.wait_state("next", ("finished",), timeout_s=240)


def test_postgres_stopped_mid_study(private_postgres, tmp_path):
    srv = Server(tmp_path / "root", extra=("--storage", private_postgres.url,
                                           "--max-running", "1")).start()
    try:
        status, body = srv.call("POST", "/api/v1/studies",
                                {"spec": SPEC.format(name="victim", n=N)})
        assert status == 201, body
        srv.wait_trials_running("victim")
        private_postgres.stop()
        try:
            seen = probe_while_down(srv, OUTAGE_S)
        finally:
            private_postgres.start()
        check_answers(seen)
        assert any(s == 503 for s, _ in seen)  # the database was down, and said so
        finish_after_fault(srv, private_postgres.url)
        the_next_study_runs(srv)
        assert CANARY not in srv.log.read_text()
    finally:
        srv.stop()


def _small_disk(size_mb: int) -> Path | None:
    """A tmpfs of ``size_mb`` (root only), or None where it cannot be mounted."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return None
    where = Path(tempfile.mkdtemp(prefix="moetune-full-"))
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs",
                           str(where)], capture_output=True)
    return where if done.returncode == 0 else None


def test_the_roots_disk_full_mid_study():
    disk = _small_disk(48)
    if disk is None:
        pytest.skip("a full disk needs a small tmpfs, which only root may mount (CI runs as "
                    "root)")
    srv = Server(disk / "root", extra=("--max-running", "1"))
    srv.log = Path(tempfile.mkdtemp()) / "serve-full.log"  # not on the disk
    try:
        srv.start()
        status, body = srv.call("POST", "/api/v1/studies",
                                {"spec": SPEC.format(name="victim", n=N)})
        assert status == 201, body
        srv.wait_trials_running("victim")
        filler = disk / "filler"
        with filler.open("wb") as f:  # every byte left
            try:
                while True:
                    f.write(b"\0" * (1 << 20))
                    f.flush()
            except OSError:
                pass
        try:
            seen = probe_while_down(srv, OUTAGE_S)
        finally:
            filler.unlink()
        check_answers(seen)
        finish_after_fault(srv, f"sqlite:///{disk / 'root' / 'service.db'}")
        the_next_study_runs(srv)
    finally:
        srv.stop()
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
        shutil.rmtree(disk, ignore_errors=True)
