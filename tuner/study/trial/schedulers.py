"""The Ray Tune schedulers a study runs under, and the stop flags they poll.

`make_scheduler` picks FIFO (``[pruning] scheduler = "none"``) or ASHA on val_loss over tokens;
both bound each trial's wall-clock time and turn a deferred Ctrl-C into KeyboardInterrupt at a
safe point (`Limits`).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Protocol

import ray
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
from ray.tune.stopper import Stopper

from tuner.study.specs.spec import StudySpec
from tuner.study.trial.searcher import StudySearcher
from tuner.study.trial.trainable import METRIC, TIME_ATTR


class StopFlag(Protocol):
    """What `run_study` polls to stop early (``threading.Event`` is one)."""

    def is_set(self) -> bool: ...


class StopWhenSet(Stopper):
    """Stops every trial and the experiment once ``flag`` is set. Ray saves its run config in
    the experiment folder; the flag (a lock, in-process only) is not saved with it."""

    def __init__(self, flag: StopFlag | None) -> None:
        self._flag = flag

    def __call__(self, trial_id: str, result: dict) -> bool:
        return self.stop_all()

    def stop_all(self) -> bool:
        return self._flag is not None and self._flag.is_set()

    def __reduce__(self) -> tuple[Any, tuple[None]]:
        return (StopWhenSet, (None,))


class AnyOf:
    """A stop flag set when any of ``flags`` is (None entries ignored)."""

    def __init__(self, *flags: StopFlag | None) -> None:
        self._flags = [f for f in flags if f is not None]

    def is_set(self) -> bool:
        return any(f.is_set() for f in self._flags)


def make_scheduler(spec: StudySpec, searcher: StudySearcher, interrupt: StopFlag | None) -> Any:
    p = spec.pruning
    limit_s = spec.resources.trial_timeout_s
    if p.scheduler == "none":
        sched: Limits = Fifo(searcher=searcher, limit_s=limit_s)
    else:
        sched = BudgetASHA(max_t=spec.budget.tokens_per_trial, grace_period=p.grace_tokens,
                            reduction_factor=p.reduction_factor, searcher=searcher,
                            limit_s=limit_s)
    sched.interrupt = interrupt
    return sched


class Limits:
    """Scheduler part that bounds trials: Ray Tune asks the scheduler which trial to run at
    every step of its loop (``choose_trial_to_run``), so that is where a trial running past
    ``limit_s`` wall-clock seconds is found. The searcher is told first, then the trial's
    worker is killed: its thread may be stuck where no flag is read. Ray reports the trial
    failed, and the searcher records it infeasible (reason ``timeout``). A worker Ray reports
    dead goes through ``on_trial_error``, where the searcher learns whether Ray's memory
    monitor killed it. The clock starts when Ray first shows the trial RUNNING. The same
    step is where a deferred Ctrl-C or SIGTERM (``interrupt``) stops the run."""

    interrupt: StopFlag | None = None  # set: raise KeyboardInterrupt here, at a safe point

    def _init_limits(self, searcher: StudySearcher, limit_s: float) -> None:
        self._searcher = searcher
        self._limit_s = limit_s
        self._running_since: dict[str, float] = {}

    def __getstate__(self) -> dict[str, Any]:
        """Ray Tune pickles its scheduler (tuner.pkl); the interrupt flag (signal handlers)
        stays in this process."""
        return {**self.__dict__, "interrupt": None}

    def choose_trial_to_run(self, tune_controller: Any) -> Any:
        if self.interrupt is not None and self.interrupt.is_set():
            raise KeyboardInterrupt
        self._end_overdue(tune_controller)
        return super().choose_trial_to_run(tune_controller)  # type: ignore[misc]

    def on_trial_error(self, tune_controller: Any, trial: Any) -> None:
        text = ""
        with contextlib.suppress(Exception):  # the error file is Ray's; a missing one is fine
            text = str(trial.get_error() or "")
        self._searcher.worker_died(trial.trial_id, text)
        super().on_trial_error(tune_controller, trial)  # type: ignore[misc]

    def _end_overdue(self, tune_controller: Any) -> None:
        now = time.monotonic()
        for trial in list(tune_controller.get_live_trials()):
            if trial.status != "RUNNING":
                continue
            since = self._running_since.setdefault(trial.trial_id, now)
            actor = trial.temporary_state.ray_actor
            if now - since > self._limit_s and actor is not None:
                self._searcher.time_out(trial.trial_id, self._limit_s)
                ray.kill(actor, no_restart=True)
                self._running_since[trial.trial_id] = float("inf")  # killed once


class Fifo(Limits, FIFOScheduler):
    """First in, first out, with the trial bounds of `Limits`."""

    def __init__(self, *, searcher: StudySearcher, limit_s: float) -> None:
        super().__init__()
        self._init_limits(searcher, limit_s)


class BudgetASHA(Limits, ASHAScheduler):
    """ASHA on val_loss over tokens that never stops a trial which has used its whole budget.

    Stock ASHA compares a trial at the max_t rung too and may stop it there, one step before
    its final report (the outcome) arrives; a run that trained all its tokens is complete.
    """

    def __init__(self, *, max_t: int, grace_period: int, reduction_factor: float,
                 searcher: StudySearcher, limit_s: float) -> None:
        super().__init__(time_attr=TIME_ATTR, metric=METRIC, mode="min", max_t=max_t,
                         grace_period=grace_period, reduction_factor=reduction_factor,
                         stop_last_trials=False)
        self._budget = max_t
        self._init_limits(searcher, limit_s)

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        decision = super().on_trial_result(tune_controller, trial, result)
        if result.get(TIME_ATTR, 0) >= self._budget:
            return self.CONTINUE
        return decision
