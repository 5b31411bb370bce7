"""`moetune cancel` stops a study's driver through the storage, wherever the driver runs, with
nothing lost; `moetune delete` removes a study no driver runs."""

from __future__ import annotations

import threading

from optuna.trial import TrialState

from tests.utils.specs import minimal_spec
from tests.utils.waiting import wait_until
from tuner import testing
from tuner.app.cli import main
from tuner.study.run.runner import run_study
from tuner.study.store import records
from tuner.study.store.control import StorageStopFlag, clear_stop, request_stop

SPACE = {"params": {"lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}}}


def spec(name: str, n: int):
    return minimal_spec(name, study={"n_trials": n, "max_concurrent": 2, "sampler": "random"},
                        space=SPACE)


def test_the_stop_flag_follows_the_storage(tmp_path):
    import optuna

    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'x.db'}", study_name="x")
    flag = StorageStopFlag(study, poll_s=0.0)
    assert not flag.is_set()
    request_stop(study, by="alice")
    assert flag.is_set() and study.user_attrs[records.STOP]["by"] == "alice"
    clear_stop(study)
    assert not StorageStopFlag(study, poll_s=0.0).is_set()


def test_cancel_stops_a_running_driver_and_resume_finishes_it(ray_session, tmp_path, capsys):
    root = tmp_path / "runs"
    s = spec("stoppable", 6)
    summary: list = []

    thread = threading.Thread(target=lambda: summary.append(run_study(
        s, run_dir=root / s.name, trainer=testing.slow_train, progress=False,
        stop=_flag_of(root, s.name))))
    thread.start()
    _wait_running(root, s.name)
    assert main(["cancel", s.name, "--root", str(root)]) == 0
    assert "stop requested" in capsys.readouterr().out
    thread.join(timeout=120)
    assert not thread.is_alive()
    (done,) = summary
    assert done.done < 6
    trials = done.study.get_trials(deepcopy=False)
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    assert [t for t in trials if t.user_attrs.get(records.REASON) == "interrupted"]
    # a trial the stop ended is interrupted (re-run on resume), never counted as pruned
    assert not [t for t in trials if t.state == TrialState.PRUNED]
    assert main(["resume", s.name, "--root", str(root), "--trainer", "tuner.testing:quick_train",
                 "--no-progress"]) == 0
    assert "6/6 trials done" in capsys.readouterr().out


class _flag_of:
    """A StorageStopFlag on the study once the driver has created it."""

    def __init__(self, root, name: str) -> None:
        self._root, self._name, self._flag = root, name, None

    def is_set(self) -> bool:
        if self._flag is None:
            study = _try_load(self._root, self._name)
            if study is None:
                return False
            self._flag = StorageStopFlag(study, poll_s=0.2)
        return self._flag.is_set()


def _try_load(root, name: str):
    from tuner.study.store import storage as st
    from tuner.study.store.database import open_existing_storage, storage_url

    try:
        return st.load_study(name, open_existing_storage(storage_url(root / name)))
    except LookupError:
        return None


def _wait_running(root, name: str, timeout_s: float = 120.0) -> None:
    def running() -> bool:
        study = _try_load(root, name)
        return study is not None and any(t.state == TrialState.RUNNING for t in study.trials)

    wait_until(running, what=f"a trial of {name} started", timeout=timeout_s)




def test_cancel_stops_a_moetune_submit_in_another_terminal(ray_session, tmp_path, capsys):
    """`moetune submit` in its own process watches its study's storage: `moetune cancel` from
    another stops it with its running trials interrupted, and `moetune resume` (the request
    now history) finishes it."""
    import subprocess
    import sys

    root = tmp_path / "runs"
    from service_process import SPEC  # the service tests' two-objective spec

    (tmp_path / "spec.toml").write_text(SPEC.format(name="from-terminal", n=6))
    driver = subprocess.Popen(
        [sys.executable, "-m", "tuner", "submit", str(tmp_path / "spec.toml"), "--root",
         str(root), "--trainer", "tuner.testing:slow_train", "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_running(root, "from-terminal", timeout_s=180)
        assert main(["cancel", "from-terminal", "--root", str(root)]) == 0
        out, err = driver.communicate(timeout=120)
    finally:
        driver.kill()
    assert "stopped early" in out + err, out + err
    trials = _try_load(root, "from-terminal").get_trials(deepcopy=False)
    assert sum(t.state == TrialState.COMPLETE for t in trials) < 6
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    assert [t for t in trials if t.user_attrs.get(records.REASON) == "interrupted"]
    capsys.readouterr()
    assert main(["resume", "from-terminal", "--root", str(root), "--trainer",
                 "tuner.testing:quick_train", "--no-progress"]) == 0
    assert "6/6 trials done" in capsys.readouterr().out


def test_cancel_without_a_running_trial_exits_2(ray_session, tmp_path, capsys):
    root = tmp_path / "runs"
    s = spec("idle", 2)
    run_study(s, run_dir=root / s.name, trainer=testing.quick_train, progress=False)
    assert main(["cancel", "idle", "--root", str(root)]) == 2
    assert "no trial is running" in capsys.readouterr().err


def test_delete_removes_the_study_and_its_folder(ray_session, tmp_path, capsys):
    root = tmp_path / "runs"
    s = spec("gone", 2)
    run_study(s, run_dir=root / s.name, trainer=testing.quick_train, progress=False)
    assert main(["delete", "gone", "--root", str(root), "--yes"]) == 0
    assert not (root / "gone").exists()
    assert main(["status", "gone", "--root", str(root)]) == 2


def test_a_new_study_on_an_empty_database_has_no_stop_to_clear(tmp_path):
    """A first ``submit`` with ``--storage`` naming a database that does not exist yet: the one
    preflight (a law's or ladder's for its first stage alike) finds no study, so there is no
    stop to clear, no error, and nothing is created."""
    from tuner.app.commands import _forget_stop
    from tuner.study.run.preflight import prepare
    from tuner.study.workflows.stage_runner import first_stage

    url = f"sqlite:///{tmp_path / 'none.db'}"
    with prepare(first_stage(spec("fresh", 2)), run_dir=tmp_path / "fresh", storage=url) as plan:
        assert plan.study is None
        _forget_stop(plan)
    assert not (tmp_path / "none.db").exists() and not (tmp_path / "fresh").exists()
