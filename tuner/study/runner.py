"""Run a study to ``n_trials``: Optuna study on storage + Ray Tune trials + ASHA, resumable.

`run_study` is what ``moetune submit`` and ``moetune resume`` call. It creates (or loads) the
study by name, reaps trials a dead driver left RUNNING, and runs only what is missing, so a
killed driver followed by a resume ends with exactly ``n_trials`` counted trials.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray import tune
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

from trainers import train
from tuner.study import database as db
from tuner.study import resume as rs
from tuner.study import storage as st
from tuner.study.progress import StudyProgress
from tuner.study.proxy import resolve_model_args
from tuner.study.samplers import make_sampler
from tuner.study.searcher import StudySearcher, Tally
from tuner.study.spec import StudySpec
from tuner.study.trainable import METRIC, TIME_ATTR, Trainer, TrialJob, run_trial


@dataclass(frozen=True, kw_only=True)
class StudySummary:
    """What a run of `run_study` did (the storage holds the details)."""

    name: str
    storage: str  # the URL with its password masked
    n_trials: int
    done: int
    reaped: tuple[int, ...]
    ran: Tally
    study: Any  # the optuna.Study, as the run left it


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
        resume.ResumeSpecError: ``resume`` with a spec that changes more than
            `resume.RESUMABLE_CHANGES`. database.StorageError: an unusable storage URL.
        ClusterError: Ray unreachable, or no node can host a trial (nothing written then).
    """
    url = db.storage_url(run_dir, storage, spec.study.storage)
    db.check_url(url, "--storage" if storage else "study.storage")
    # Ray first: a cluster that is unreachable or too small must leave nothing written.
    with ray_cluster(address, spec):
        run_dir.mkdir(parents=True, exist_ok=True)
        # a readable copy of the spec (its storage password masked, as in the stored spec)
        (run_dir / "spec.json").write_text(json.dumps(spec.to_dict(), indent=2) + "\n")
        store = db.open_storage(url)
        study = _open_study(spec, store, resume=resume)
        reaped = tuple(rs.reap_interrupted(study, store))
        tally = _run_missing(spec, study, run_dir=run_dir, trainer=trainer, progress=progress)
    return StudySummary(name=spec.name, storage=db.shown(url), n_trials=spec.study.n_trials,
                        done=rs.n_done(study), reaped=reaped, ran=tally, study=study)


def _open_study(spec: StudySpec, store: Any, *, resume: bool) -> Any:
    """Create the study, or load it, check ``spec`` against the stored one and record it.

    A loaded study gets a sampler seeded for the trials it already holds, so a resume
    continues the proposal sequence instead of replaying it (see `samplers.sampler_seed`).
    """
    if not resume:
        return st.create_study(spec, store, make_sampler(spec))
    study = st.load_study(spec.name, store)
    st.migrate(study)
    stored = st.stored_spec(study)
    rs.check_resume_spec(stored, spec)
    if stored.to_dict() != spec.to_dict():
        st.update_stored_spec(study, spec)
    held = len(study.get_trials(deepcopy=False))
    return st.load_study(spec.name, store, make_sampler(spec, n_existing=held))


def _run_missing(spec: StudySpec, study: Any, *, run_dir: Path, trainer: Trainer,
                 progress: bool) -> Tally:
    tally = Tally()
    done = rs.n_done(study)
    left = spec.study.n_trials - done
    if left <= 0:
        return tally
    bar = StudyProgress(name=spec.name, total=spec.study.n_trials, already_done=done,
                        enabled=progress)
    searcher = StudySearcher(study=study, spec=spec, model_args=resolve_model_args(spec),
                             n_to_run=left, tally=tally, on_change=bar)
    try:
        _fit(spec, searcher, run_dir=run_dir, trainer=trainer, n_samples=left)
    finally:
        # However fit ended (Ctrl-C or an error included), nothing stays RUNNING.
        searcher.abandon_live()
        bar.close()
    return tally


class ClusterError(ValueError):
    """The Ray cluster cannot be reached, or no node of it can host one trial of the spec."""


@contextlib.contextmanager
def ray_cluster(address: str | None, spec: StudySpec) -> Iterator[None]:
    """`connect_cluster`, and shut Ray down on exit if it was started here."""
    started = connect_cluster(address, spec)
    try:
        yield
    finally:
        if started:
            ray.shutdown()


def connect_cluster(address: str | None, spec: StudySpec) -> bool:
    """Join ``address``, or reuse an initialised Ray, or start a local one; then check that one
    node can host a trial (else the study would wait forever). True if Ray was started here.

    Raises:
        ClusterError: no cluster at ``address``, or no node has the CPUs/GPUs a trial needs.
    """
    started = False
    if not ray.is_initialized():
        check_reachable(address)
        try:
            ray.init(address=address, include_dashboard=False, logging_level=logging.WARNING,
                     log_to_driver=False)
        except (ConnectionError, ValueError, RuntimeError) as e:
            raise ClusterError(f"--address {address}: cannot connect to a Ray cluster "
                               f"({type(e).__name__}: {e})") from None
        started = True
    try:
        _check_capacity(spec)
    except ClusterError:
        if started:
            ray.shutdown()
        raise
    return started


def check_reachable(address: str | None, timeout_s: float = 5.0) -> None:
    """A HOST:PORT where nothing listens makes ``ray.init`` retry for about two minutes; one TCP
    connect says so at once. ``auto`` and ``ray://`` client addresses are left to Ray.

    Raises:
        ClusterError: not HOST:PORT, or nothing accepts connections there.
    """
    if not address or address == "auto" or "://" in address:
        return
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ClusterError(f"--address: must be HOST:PORT (the head's GCS, e.g. 10.0.0.1:6379), "
                           f"auto or ray://HOST:PORT, but got {address!r}.")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise ClusterError(f"--address {address}: nothing accepts connections there ({e}); "
                           "start the head with `ray start --head` or check the address."
                           ) from None


def _check_capacity(spec: StudySpec) -> None:
    r = spec.resources
    need = {"CPU": r.cpus_per_trial, "GPU": r.gpus_per_trial}
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    if any(all(node.get(k, 0.0) >= v for k, v in need.items() if v > 0) for node in nodes):
        return
    most = {k: max((node.get(k, 0.0) for node in nodes), default=0.0) for k in need}
    raise ClusterError(
        f"resources: one trial needs cpus_per_trial = {r.cpus_per_trial} and gpus_per_trial = "
        f"{r.gpus_per_trial}, but no node of the Ray cluster has that much (the largest have "
        f"{most['CPU']:g} CPUs, {most['GPU']:g} GPUs); lower [resources] or join a larger "
        "cluster with --address.")


def _fit(spec: StudySpec, searcher: StudySearcher, *, run_dir: Path, trainer: Trainer,
         n_samples: int) -> None:
    # Ray's newer console output prints an experiment box even at verbose=0; the classic one
    # is silent there.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
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
