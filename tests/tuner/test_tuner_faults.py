"""The fault suite: real driver processes (``python -m tuner``) with fake trainers, hit by the
faults a study meets in practice, then resumed. Each fault must end with no trial lost (every
trial that was COMPLETE before is COMPLETE after, with its values) and none left RUNNING, and
the resumed study must count exactly ``n_trials``.

``MOETUNE_FAULT_TABLE=FILE pytest tests/tuner/test_tuner_faults.py`` also writes the rows of the
"Reliability" table of benchmarks/RESULTS.md to FILE.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.utils.waiting import ended, wait_until

SPEC = """
[study]
name = "{name}"
n_trials = {n_trials}
max_concurrent = 2
sampler = "random"
[budget]
tokens_per_trial = 500
eval_every_tokens = 100
[resources]
trial_timeout_s = {timeout}
[space.params.lr]
{space}
"""
FLOAT_LR = 'type = "float"\nlow = 1e-4\nhigh = 1e-2\nlog = true'
SLOW = "tuner.testing:slow_train"  # ~1 s per evaluation, 5 per trial
QUICK = "tuner.testing:quick_train"
MIXED = "tuner.testing:mixed_train"  # lr 7e-4 kills its worker, 8e-4 hangs (tuner.testing)
WAIT_S = 180  # generous: a loaded CI machine is slow, and no assertion depends on it


def write_spec(tmp: Path, name: str, *, n_trials: int = 4, timeout: float = 3600,
               space: str = FLOAT_LR) -> Path:
    path = tmp / f"{name}.toml"
    path.write_text(SPEC.format(name=name, n_trials=n_trials, timeout=timeout, space=space))
    return path


def tuner_cmd(*args: str) -> list[str]:
    quiet = ["--no-progress"] if args[0] in ("submit", "resume") else []
    return [sys.executable, "-m", "tuner", *args, *quiet]


def states(db: Path) -> list[str]:
    """Trial states from the sqlite file, read-only ([] before the tables exist)."""
    if not db.exists():
        return []
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True,
                                                timeout=5)) as con:
            return [s for (s,) in con.execute("SELECT state FROM trials ORDER BY number")]
    except sqlite3.Error:
        return []


def complete_values(db: Path) -> dict[int, float]:
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
        rows = con.execute("SELECT t.number, v.value FROM trials t JOIN trial_values v "
                           "ON v.trial_id = t.trial_id WHERE t.state = 'COMPLETE' "
                           "AND v.objective = 0")
        return dict(rows.fetchall())


def wait_for(what: str, cond: Callable[[], bool], proc: subprocess.Popen | None = None) -> None:
    wait_until(cond, what=what, timeout=WAIT_S,
               gone=ended(proc, "the driver") if proc is not None else None)


@contextlib.contextmanager
def driver(*args: str, stdout: int | None = subprocess.DEVNULL) -> Iterator[subprocess.Popen]:
    """A driver in its own session; whatever it started ends with the test."""
    proc = subprocess.Popen(tuner_cmd(*args), start_new_session=True, stdout=stdout,
                            stderr=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(tuner_cmd(*args), capture_output=True, text=True, timeout=600)


ROWS: list[str] = []


def record(fault: str, before: dict[int, float], db: Path, command: str) -> None:
    """Check the invariants after the resume and keep a table row."""
    after = complete_values(db)
    lost = [n for n, v in before.items() if after.get(n) != v]
    running = [s for s in states(db) if s in ("RUNNING", "WAITING")]
    assert not lost, f"{fault}: COMPLETE trials lost or changed: {lost}"
    assert not running, f"{fault}: trials left {running}"
    ROWS.append(f"| {fault} | {len(before)} | {len(after)} | {len(lost)} | {len(running)} | "
                f"`{command}` |")


@pytest.fixture(scope="module", autouse=True)
def _table() -> Iterator[None]:
    yield
    out = os.environ.get("MOETUNE_FAULT_TABLE")
    if out and ROWS:
        Path(out).write_text("\n".join(ROWS) + "\n")


def resume_ok(root: Path, name: str, trainer: str = QUICK) -> subprocess.CompletedProcess:
    done = run("resume", name, "--root", str(root), "--trainer", trainer)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def counted(db: Path) -> int:
    return sum(s in ("COMPLETE", "PRUNED") for s in states(db))


def descendants(pid: int) -> list[int]:
    """Processes below ``pid`` (from /proc), so a test kills only what its driver started."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rpartition(")")[2].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


# -- driver killed --------------------------------------------------------------------------


@pytest.mark.parametrize("when", ["start-up", "mid-trial"])
def test_sigkill_then_resume(tmp_path, when):
    name = f"kill-{when}"
    spec, root = write_spec(tmp_path, name), tmp_path / "runs"
    db = root / name / "study.db"
    with driver("submit", str(spec), "--root", str(root), "--trainer", SLOW) as proc:
        if when == "start-up":  # the driver created the study; trials may be starting
            wait_for("the driver's lease and study", lambda: _has_lease(db), proc)
        else:
            wait_for("a COMPLETE and a RUNNING trial",
                     lambda: "COMPLETE" in states(db) and "RUNNING" in states(db), proc)
        before = complete_values(db)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    # the dead driver's lease is taken over at once (same host); `submit --resume` also
    # finishes a study whose driver died between creating it and recording its spec
    done = run("submit", str(spec), "--resume", "--root", str(root), "--trainer", QUICK)
    assert done.returncode == 0, done.stderr[-2000:]
    assert counted(db) == 4
    record(f"driver SIGKILL at {when}", before, db, "moetune submit SPEC --resume")


def _has_lease(db: Path) -> bool:
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
            return (con.execute("SELECT COUNT(*) FROM moetune_leases").fetchone()[0] == 1
                    and con.execute("SELECT COUNT(*) FROM studies").fetchone()[0] == 1)
    except sqlite3.Error:
        return False


def test_sigkill_during_the_report_then_resume(tmp_path):
    name = "kill-report"
    spec, root = write_spec(tmp_path, name, n_trials=2), tmp_path / "runs"
    db = root / name / "study.db"
    with driver("submit", str(spec), "--root", str(root), "--trainer", QUICK,
                stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "study NAME: 2/2 trials done ..." precedes the report
        assert "2/2 trials done" in line, line
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    before = complete_values(db)
    resume_ok(root, name)
    assert counted(db) == 2 and (root / name / "report" / "ranked.md").is_file()
    record("driver SIGKILL during the report", before, db, "moetune resume NAME")


def test_sigterm_is_a_clean_stop_with_exit_143(tmp_path):
    name = "term"
    spec, root = write_spec(tmp_path, name), tmp_path / "runs"
    db = root / name / "study.db"
    with driver("submit", str(spec), "--root", str(root), "--trainer", SLOW) as proc:
        wait_for("a COMPLETE and a RUNNING trial",
                 lambda: "COMPLETE" in states(db) and "RUNNING" in states(db), proc)
        started = [p for p in descendants(proc.pid) if "ray" in cmdline(p)]
        assert started  # the local Ray this driver started: its processes are below it
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=120) == 143
        assert proc.stderr is not None and "moetune resume term" in proc.stderr.read()
        # Ray processes this driver started end with it
        wait_for("the driver's Ray processes to end", lambda: not any(map(alive, started)))
    assert "RUNNING" not in states(db)  # the in-flight trials were recorded as interrupted
    before = complete_values(db)
    resume_ok(root, name)
    assert counted(db) == 4
    record("SIGTERM to the driver", before, db, "moetune resume NAME")


# -- a second driver ------------------------------------------------------------------------


def test_a_second_driver_is_refused_naming_the_holder(tmp_path):
    name = "twice"
    # its trials hang (no time limit to speak of): the first driver runs until stopped
    spec = write_spec(tmp_path, name, space='type = "categorical"\nchoices = [8e-4]')
    root = tmp_path / "runs"
    db = root / name / "study.db"
    with driver("submit", str(spec), "--root", str(root), "--trainer", MIXED) as proc:
        wait_for("two RUNNING trials", lambda: states(db).count("RUNNING") == 2, proc)
        before = complete_values(db)
        for args in (["resume", name], ["submit", str(spec), "--resume"]):
            second = run(*args, "--root", str(root), "--trainer", QUICK)
            assert second.returncode == 2, second.stderr[-2000:]
            assert "being run by another driver" in second.stderr
            assert f"pid {proc.pid} since " in second.stderr
            assert states(db) == ["RUNNING", "RUNNING"]  # nothing reaped, nothing added
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=WAIT_S) == 143
    resume_ok(root, name)  # the lease was released: the next driver runs
    assert counted(db) == 4
    record("a second driver (resume, submit --resume)", before, db, "moetune resume NAME")


def test_two_simultaneous_submits_one_runs_the_other_exits_2(tmp_path):
    name = "race"
    spec, root = write_spec(tmp_path, name, n_trials=2), tmp_path / "runs"
    procs = [subprocess.Popen(tuner_cmd("submit", str(spec), "--root", str(root), "--trainer",
                                        QUICK), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = sorted((p.wait(timeout=600), p.stderr.read() if p.stderr else "") for p in procs)
    assert [rc for rc, _ in results] == [0, 2], results
    assert "Traceback" not in results[1][1] and "error:" in results[1][1]
    assert counted(root / name / "study.db") == 2


# -- trials that do not end by themselves ---------------------------------------------------


def test_a_hung_trial_ends_infeasible_at_its_time_limit_and_the_study_goes_on(tmp_path):
    name = "hung"
    # seed 0's random sampler draws 3e-3, 8e-4, 3e-3 (the second hangs). The limit leaves the
    # quick trials room on a loaded machine (3 s did not: one read its corpus for longer)
    spec = write_spec(tmp_path, name, n_trials=3, timeout=10,
                      space='type = "categorical"\nchoices = [8e-4, 3e-3]')
    root = tmp_path / "runs"
    done = run("submit", str(spec), "--root", str(root), "--trainer", MIXED)
    assert done.returncode == 0, done.stderr[-2000:]
    status = run("status", name, "--root", str(root))
    assert status.stdout.count("infeasible") == 1 and status.stdout.count("complete") == 2
    assert "time limit: ran longer than resources.trial_timeout_s = 10" in status.stdout
    db = root / name / "study.db"
    assert states(db) == ["COMPLETE"] * 3  # infeasible = COMPLETE with a violated constraint
    before = complete_values(db)
    resume_ok(root, name, MIXED)  # nothing to re-run: a timed-out trial counts as finished
    assert len(states(db)) == 3
    record("a hung trial (time limit 10 s)", before, db, "moetune resume NAME")


def test_a_killed_worker_fails_its_trial_and_the_study_goes_on(tmp_path):
    name = "worker"
    # seed 0's random sampler draws 3e-3, 7e-4, 3e-3 (the second kills its worker)
    spec = write_spec(tmp_path, name, n_trials=3,
                      space='type = "categorical"\nchoices = [7e-4, 3e-3]')
    root = tmp_path / "runs"
    done = run("submit", str(spec), "--root", str(root), "--trainer", MIXED)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    status = run("status", name, "--root", str(root))
    assert "worker process died" in status.stdout
    db = root / name / "study.db"
    assert states(db) == ["COMPLETE", "FAIL", "COMPLETE"]
    before = complete_values(db)
    resume_ok(root, name, MIXED)
    record("a trial's worker killed", before, db, "moetune resume NAME")


def test_an_oversized_corpus_is_refused_before_anything_is_written(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_bytes(b"x" * 3000)
    (corpus / "b.txt").write_bytes(b"y" * 3000)
    spec = write_spec(tmp_path, "big")
    spec.write_text(spec.read_text() + f'[data]\ncorpus = "{corpus}"\nmax_corpus_gb = 5e-6\n')
    done = run("submit", str(spec), "--root", str(tmp_path / "runs"), "--trainer", QUICK)
    assert done.returncode == 2
    assert "data.corpus" in done.stderr and "data.max_corpus_gb" in done.stderr
    assert "6e-06 GB" in done.stderr and not (tmp_path / "runs").exists()


# -- storage faults -------------------------------------------------------------------------


def test_sqlite_file_deleted_mid_study_is_never_recreated(tmp_path):
    name = "gone"
    spec, root = write_spec(tmp_path, name, n_trials=6), tmp_path / "runs"
    db = root / name / "study.db"
    backup = tmp_path / "backup.db"
    with driver("submit", str(spec), "--root", str(root), "--trainer", SLOW) as proc:
        wait_for("a COMPLETE trial", lambda: "COMPLETE" in states(db), proc)
        with contextlib.closing(sqlite3.connect(db)) as src, \
                contextlib.closing(sqlite3.connect(backup)) as dst:
            src.backup(dst)  # what an operator restores
        db.unlink()
        assert proc.wait(timeout=WAIT_S) == 1
        err = proc.stderr.read() if proc.stderr else ""
    assert "deleted or replaced" in err and str(db) in err and "Traceback" not in err
    assert not db.exists()  # nothing recreated
    shutil.copy(backup, db)
    before = complete_values(db)
    resume_ok(root, name)
    assert counted(db) == 6
    record("SQLite file deleted (then restored from a backup)", before, db,
           "moetune resume NAME")


def test_full_disk_stops_the_driver_with_one_line_and_resume_finishes(tmp_path):
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a small tmpfs (CI runs as root)")
    mnt = Path(tempfile.mkdtemp(prefix="moetune-full-"))
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)]).returncode:
        pytest.skip("cannot mount a tmpfs here (a container without CAP_SYS_ADMIN?)")
    try:
        name = "full"
        spec, root = write_spec(tmp_path, name, n_trials=6), mnt / "runs"
        db = root / name / "study.db"
        filler = mnt / "filler"
        with driver("submit", str(spec), "--root", str(root), "--trainer", SLOW) as proc:
            wait_for("a COMPLETE trial", lambda: "COMPLETE" in states(db), proc)
            before = complete_values(db)
            with filler.open("wb") as f, contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * (1 << 20))
            rc = proc.wait(timeout=WAIT_S)
            err = proc.stderr.read() if proc.stderr else ""
        assert rc == 1, err[-2000:]
        assert re.search(r"storage sqlite:///\S+study\.db: \w+Error: .*full", err), err[-2000:]
        assert "Traceback" not in err
        filler.unlink()
        resume_ok(root, name)
        assert counted(db) == 6
        record("disk full (64 MB tmpfs filled, then freed)", before, db, "moetune resume NAME")
    finally:
        subprocess.run(["umount", "-l", str(mnt)])


def pg_states(url: str, name: str) -> list[str]:
    import psycopg2

    try:
        with psycopg2.connect(url, connect_timeout=3) as con, con.cursor() as cur:
            cur.execute("SELECT t.state FROM trials t JOIN studies s ON s.study_id = t.study_id "
                        "WHERE s.study_name = %s ORDER BY t.number", (name,))
            return [str(s) for (s,) in cur.fetchall()]
    except psycopg2.Error:
        return []


def test_postgresql_stopped_mid_study_then_restarted(private_postgres, tmp_path):
    name = "pgdown"
    spec, root, url = write_spec(tmp_path, name, n_trials=6), tmp_path / "runs", \
        private_postgres.url
    with driver("submit", str(spec), "--root", str(root), "--trainer", SLOW,
                "--storage", url) as proc:
        wait_for("a COMPLETE trial", lambda: "COMPLETE" in pg_states(url, name), proc)
        private_postgres.stop()
        rc = proc.wait(timeout=WAIT_S)
        err = proc.stderr.read() if proc.stderr else ""
    private_postgres.start()
    assert rc == 1, err[-2000:]
    assert re.search(r"storage postgresql://moetune_canary:\*\*\*@127\.0\.0\.1:\d+/postgres: "
                     r"\w+Error: ", err), err[-2000:]
    assert "Traceback" not in err
    before = {i: s for i, s in enumerate(pg_states(url, name)) if s == "COMPLETE"}
    done = run("resume", name, "--root", str(root), "--trainer", QUICK, "--storage", url)
    assert done.returncode == 0, done.stderr[-2000:]
    after = pg_states(url, name)
    assert all(after[i] == "COMPLETE" for i in before)
    assert after.count("COMPLETE") == 6 and "RUNNING" not in after
    ROWS.append(f"| PostgreSQL stopped mid-study, then restarted | {len(before)} | "
                f"{after.count('COMPLETE')} | 0 | 0 | `moetune resume NAME --storage URL` |")
