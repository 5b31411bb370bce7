"""Run a study to ``n_trials``: Optuna study on storage + Ray Tune trials + ASHA, resumable.

`run_study` is what ``moetune submit`` and ``moetune resume`` call. It creates (or loads) the
study by name, reaps trials a dead driver left RUNNING, and runs only what is missing, so a
killed driver followed by a resume ends with exactly ``n_trials`` counted trials.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray import tune
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

from trainers import train
from tuner import storage as st
from tuner.progress import StudyProgress
from tuner.proxy import resolve_model_args
from tuner.samplers import make_sampler
from tuner.searcher import StudySearcher, Tally
from tuner.spec import StudySpec
from tuner.trainable import METRIC, TIME_ATTR, Trainer, TrialJob, run_trial


@dataclass(frozen=True, kw_only=True)
class StudySummary:
    """What a run of `run_study` did (the storage holds the details)."""

    name: str
    storage: str
    n_trials: int
    done: int
    reaped: tuple[int, ...]
    ran: Tally


def run_study(spec: StudySpec, *, run_dir: Path, storage: str = "", resume: bool = False,
              trainer: Trainer = train, address: str | None = None,
              progress: bool = True) -> StudySummary:
    """Run ``spec`` until its study counts ``n_trials`` finished trials.

    Args:
        run_dir: the study's folder (``runs/<name>``); Ray's results go under ``ray/``.
        storage: database URL (beats the spec's); default: ``run_dir/study.db``.
        resume: load the existing study instead of creating it.
        trainer: a function with `trainers.train`'s signature (tests inject fakes here).
        address: Ray cluster to join; default: the running Ray, else a new local one.

    Raises:
        FileExistsError: not ``resume`` and the study exists. LookupError: ``resume`` and not.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    url = st.storage_url(run_dir, storage, spec)
    store = st.open_storage(url)
    sampler = make_sampler(spec)
    if resume:
        study = st.load_study(spec.name, store, sampler)
    else:
        study = st.create_study(spec, store, sampler)
    reaped = tuple(st.reap_interrupted(study, store))
    done = st.n_done(study)
    left = spec.study.n_trials - done
    tally = Tally()
    if left > 0:
        bar = StudyProgress(name=spec.name, total=spec.study.n_trials, already_done=done,
                            enabled=progress)
        searcher = StudySearcher(study=study, spec=spec, model_args=resolve_model_args(spec),
                                 n_to_run=left, tally=tally, on_change=bar)
        try:
            _fit(spec, searcher, run_dir=run_dir, trainer=trainer, address=address,
                 n_samples=left)
        finally:
            # However fit ended (Ctrl-C included), nothing stays RUNNING.
            searcher.abandon_live(st.INTERRUPTED)
            bar.close()
    return StudySummary(name=spec.name, storage=url, n_trials=spec.study.n_trials,
                        done=st.n_done(study), reaped=reaped, ran=tally)


def _fit(spec: StudySpec, searcher: StudySearcher, *, run_dir: Path, trainer: Trainer,
         address: str | None, n_samples: int) -> None:
    started = _ensure_ray(address)
    logging.getLogger("ray.tune").setLevel(logging.WARNING)  # our progress bar says enough
    # Ray's newer console output prints an experiment box even at verbose=0; the classic one
    # is silent there.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    try:
        tuner = tune.Tuner(
            tune.with_resources(
                tune.with_parameters(run_trial, job=_job(spec, searcher), trainer=trainer),
                {"cpu": spec.resources.cpus_per_trial, "gpu": spec.resources.gpus_per_trial}),
            tune_config=tune.TuneConfig(
                search_alg=searcher, scheduler=_scheduler(spec), num_samples=n_samples,
                max_concurrent_trials=spec.study.max_concurrent,
                # One worker process serves many trials: saves a process start + imports each.
                reuse_actors=True),
            run_config=tune.RunConfig(
                name=f"attempt-{time.strftime('%Y%m%d-%H%M%S')}",
                storage_path=str((run_dir / "ray").resolve()), verbose=0,
                failure_config=tune.FailureConfig(max_failures=0)),
        )
        tuner.fit()
    finally:
        if started:
            ray.shutdown()


def _ensure_ray(address: str | None) -> bool:
    """Join ``address``, or reuse an initialised Ray, or start a local one. True if started."""
    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING,
                              "log_to_driver": False}
    ray.init(address=address, **kwargs)
    return True


def _scheduler(spec: StudySpec) -> Any:
    p = spec.pruning
    if p.scheduler == "none":
        return FIFOScheduler()
    return _BudgetASHA(max_t=spec.budget.tokens_per_trial, grace_period=p.grace_tokens,
                       reduction_factor=p.reduction_factor)


class _BudgetASHA(ASHAScheduler):
    """ASHA on val_loss over tokens that never stops a trial which has used its whole budget.

    Stock ASHA compares a trial at the max_t rung too and may stop it there, one step before
    its final report (the outcome) arrives; a run that trained all its tokens is complete.
    """

    def __init__(self, *, max_t: int, grace_period: int, reduction_factor: float) -> None:
        super().__init__(time_attr=TIME_ATTR, metric=METRIC, mode="min", max_t=max_t,
                         grace_period=grace_period, reduction_factor=reduction_factor,
                         stop_last_trials=False)
        self._budget = max_t

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        decision = super().on_trial_result(tune_controller, trial, result)
        if result.get(TIME_ATTR, 0) >= self._budget:
            return self.CONTINUE
        return decision


def _job(spec: StudySpec, searcher: StudySearcher) -> TrialJob:
    return TrialJob(model_args=searcher.model_args.to_dict(), corpus=spec.data.corpus,
                    vocab_size=spec.data.vocab_size, token_budget=spec.budget.tokens_per_trial,
                    eval_every_tokens=spec.budget.eval_every_tokens, seed=spec.study.seed,
                    cpus_per_trial=spec.resources.cpus_per_trial,
                    gpus_per_trial=spec.resources.gpus_per_trial)
