"""Kill the driver with SIGKILL mid-study, then `moetune resume` finishes it (real processes)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import optuna
from optuna.trial import TrialState

from tests.utils.waiting import ended, wait_until
from tuner.study.run import resume as rs
from tuner.study.store import database as db
from tuner.study.store import records

SPEC = """
[study]
name = "killed"
n_trials = 6
max_concurrent = 2
[budget]
tokens_per_trial = 500
eval_every_tokens = 100
[pruning]
scheduler = "none"
[space.params.lr]
type = "float"
low = 1e-4
high = 1e-2
log = true
"""
TRAINER = "tuner.testing:slow_train"  # ~1 s per evaluation, 5 evaluations per trial


def states(db: Path) -> list[str]:
    """Trial states; a RUNNING trial whose parameters are not sampled yet reads "ASKED"."""
    if not db.exists():
        return []
    query = ("SELECT t.state, (SELECT COUNT(*) FROM trial_params p "
             "WHERE p.trial_id = t.trial_id) FROM trials t")
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as con:
            return ["ASKED" if state == "RUNNING" and n == 0 else state
                    for state, n in con.execute(query)]
    except sqlite3.OperationalError:  # tables not created yet
        return []


def test_sigkill_driver_then_resume_finishes_the_study(tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    root = tmp_path / "runs"
    db_file = root / "killed" / db.DB_FILE
    cmd = [sys.executable, "-m", "tuner"]
    log = tmp_path / "driver.stderr"  # a file, not a pipe: nobody reads it until the end
    with log.open("wb") as err:
        driver = subprocess.Popen([*cmd, "submit", str(spec), "--root", str(root),
                                   "--trainer", TRAINER, "--no-progress"],
                                  start_new_session=True, stdout=subprocess.DEVNULL,
                                  stderr=err)
    try:
        def gone() -> str | None:
            why = ended(driver, "the driver")()
            return why and f"{why}: {log.read_text(errors='replace')[-2000:]}"

        # wait for a finished trial and one training (sampled, so it has parameters to re-run)
        wait_until(lambda: (s := states(db_file)).count("COMPLETE") >= 1 and "RUNNING" in s,
                   what="a COMPLETE and a RUNNING trial to kill the driver at", timeout=180,
                   gone=gone)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
    finally:
        _kill_group(driver)
    before = optuna.load_study(study_name="killed", storage=f"sqlite:///{db_file}")
    kept = {t.number: t.values for t in before.trials if t.state == TrialState.COMPLETE}
    in_flight = [t.number for t in before.trials if t.state == TrialState.RUNNING]
    assert kept and in_flight

    done = subprocess.run([*cmd, "resume", "killed", "--root", str(root), "--trainer", TRAINER,
                           "--no-progress"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"re-ran {len(in_flight)} interrupted trial(s)" in done.stdout

    study = optuna.load_study(study_name="killed", storage=f"sqlite:///{db_file}")
    trials = study.trials
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    for n, values in kept.items():  # every completed trial kept as it was
        assert trials[n].state == TrialState.COMPLETE and trials[n].values == values
    for n in in_flight:  # marked interrupted, and re-run exactly once with the same params
        assert trials[n].state == TrialState.FAIL
        assert trials[n].user_attrs[records.REASON] == rs.INTERRUPTED
        reruns = [t for t in trials if t.user_attrs.get(records.RERUN_OF) == n]
        assert len(reruns) == 1
        if trials[n].params:  # killed while sampling: nothing to repeat, a fresh point runs
            assert reruns[0].params == trials[n].params
        assert reruns[0].state == TrialState.COMPLETE
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 6  # n_trials reached, no duplicates
    # Apart from the re-runs, the resumed driver proposes new points, never the earlier ones.
    fresh = [t.params["lr"] for t in trials
             if records.RERUN_OF not in t.user_attrs and "lr" in t.params]
    assert len(set(fresh)) == len(fresh), fresh
    assert len(trials) == 6 + len(in_flight)


def _kill_group(proc: subprocess.Popen) -> None:
    """Ray processes the killed driver started live in its session; end them (by group id)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
