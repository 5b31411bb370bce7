"""Run a study to ``n_trials``: Optuna study on storage + Ray Tune trials + ASHA, resumable.

`run_study` is what ``moetune submit`` and ``moetune resume`` call. It takes the study's lease
(one driver per study, `tuner.study.store.lease`), creates (or loads) the study by name, reaps
trials a dead driver left RUNNING, and runs only what is missing, so a killed driver followed by a
resume ends with exactly ``n_trials`` counted trials.

With ``[study] noise_repeats`` set, a study that reaches ``n_trials`` then re-trains its top
trials with other seeds in this process and stores the spread of val_loss
(`tuner.study.results.noise`); those runs are not trials and never count toward ``n_trials``.

Bounds on a trial: the scheduler ends a trial that runs past ``resources.trial_timeout_s``
(its worker is killed, so even a trial stuck in native code ends) and tells the searcher which
trials Ray's memory monitor killed; both end infeasible with their reason, and the study goes
on. A storage that fails mid-study ends the run with `database.StorageFault` (one line).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import ray
from ray import tune
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
from ray.tune.stopper import Stopper

from trainers import train
from tuner.study.results.noise import measure_noise
from tuner.study.run import timing
from tuner.study.run.progress import StudyProgress, stderr_lines
from tuner.study.run.samplers import make_sampler
from tuner.study.run.searcher import StudySearcher, Tally
from tuner.study.run.trainable import METRIC, TIME_ATTR, Trainer, TrialJob, run_trial
from tuner.study.specs.proxy import resolve_model_args
from tuner.study.specs.spec import StudySpec, max_corpus_bytes
from tuner.study.store import database as db
from tuner.study.store import lease as ls
from tuner.study.store import resume as rs
from tuner.study.store import storage as st
from tuner.study.workflows import warm_start as ws
from tuner.study.workflows.start import begin


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
              progress: bool = True, stop: StopFlag | None = None,
              interrupt: StopFlag | None = None) -> StudySummary:
    """Run ``spec`` until its study counts ``n_trials`` finished trials.

    Args:
        run_dir: the study's folder (``runs/<name>``); Ray's results go under ``ray/``.
        storage: database URL (beats the spec's); default: ``run_dir/study.db``.
        resume: load the existing study instead of creating it.
        trainer: a function with `trainers.train`'s signature (tests inject fakes here).
        address: Ray cluster to join; default: the running Ray, else a new local one.
        stop: once set (e.g. a ``threading.Event`` set by the service's cancel), no trial
            starts and the running ones are stopped and recorded as interrupted, so a resume
            re-runs exactly them.
        interrupt: once set (the CLI's Ctrl-C and SIGTERM handler), KeyboardInterrupt is
            raised at the next step of Ray Tune's loop (a safe point: never inside a storage
            write), in-flight trials are recorded as interrupted and the lease is released.

    Raises:
        FileExistsError: not ``resume`` and the study exists. LookupError: ``resume`` and not.
        resume.ResumeSpecError: ``resume`` with a spec that changes more than
            `resume.RESUMABLE_CHANGES`. database.StorageError: an unusable storage URL.
        ClusterError: Ray unreachable, or no node can host a trial (nothing written then).
        lease.LeaseHeld: another live driver runs the study (nothing written then).
        database.StorageFault: the storage failed while the study ran.
        warm_start.WarmStartError: ``[start] warm_start`` names no study with the same
            objectives (nothing written then).
    """
    url = db.storage_url(run_dir, storage, spec.study.storage)
    db.check_url(url, "--storage" if storage else "study.storage")
    # the study to warm-start from is looked up before anything is written
    source = None if resume or not spec.start.warm_start else ws.open_source(
        spec, url=url, run_dir=run_dir)
    # Ray first: a cluster that is unreachable or too small must leave nothing written.
    with ray_cluster(address, spec):
        run_dir.mkdir(parents=True, exist_ok=True)
        store = db.open_storage(url)
        try:
            with ls.held(store.engine, spec.name) as lost:
                # a readable copy of the spec (its storage password masked, as stored)
                (run_dir / "spec.json").write_text(json.dumps(spec.to_dict(), indent=2) + "\n")
                study = _open_study(spec, store, resume=resume)
                begin(study, spec, model_args=resolve_model_args(spec),
                      source=lambda: source or ws.open_source(spec, url=url, run_dir=run_dir))
                reaped = tuple(rs.reap_interrupted(study, store))
                gone = db.FileGone(url)
                stopping = _AnyOf(stop, lost, gone)
                tally = _run_missing(spec, study, run_dir=run_dir, trainer=trainer,
                                     progress=progress, stop=stopping, interrupt=interrupt)
                gone.check()
                done = rs.n_done(study)
                if done >= spec.study.n_trials:
                    _measure_noise(spec, study, trainer=trainer, progress=progress,
                                   stop=stopping, interrupt=interrupt)
                    gone.check()
        except Exception as e:
            if db.fault_of(e) is None or isinstance(e, db.StorageFault):
                raise
            raise db.StorageFault(db.describe_fault(url, e)) from None
    if lost.is_set():
        raise ls.LeaseLost(f"study {spec.name!r}: another driver took over the study's lease "
                           "while this one could not reach the database; this driver stopped.")
    return StudySummary(name=spec.name, storage=db.shown(url), n_trials=spec.study.n_trials,
                        done=done, reaped=reaped, ran=tally, study=study)


def _open_study(spec: StudySpec, store: Any, *, resume: bool) -> Any:
    """Create the study, or load it, check ``spec`` against the stored one and record it.

    A loaded study gets a sampler seeded for the trials it already holds, so a resume
    continues the proposal sequence instead of replaying it (see `samplers.sampler_seed`).
    """
    if not resume:
        return st.create_study(spec, store, make_sampler(spec))
    study = st.load_study(spec.name, store)
    if not st.is_complete(study):  # its creating driver died before recording the spec
        st.finish_creation(study, spec)
    st.migrate(study)
    stored = st.stored_spec(study)
    rs.check_resume_spec(stored, spec)
    if stored.to_dict() != spec.to_dict():
        st.update_stored_spec(study, spec)
    held = len(study.get_trials(deepcopy=False))
    return st.load_study(spec.name, store, make_sampler(spec, n_existing=held))


def _measure_noise(spec: StudySpec, study: Any, *, trainer: Trainer, progress: bool,
                   stop: StopFlag, interrupt: StopFlag | None) -> None:
    """`noise.measure_noise` once the trials are done (Ray Tune's trials have ended, so the
    re-trainings in this process have the cores to themselves). Polled between runs: ``stop``
    ends it without storing anything, ``interrupt`` raises KeyboardInterrupt as during the
    trials."""
    def should_stop() -> bool:
        if interrupt is not None and interrupt.is_set():
            raise KeyboardInterrupt
        return stop.is_set()

    measure_noise(study, spec, trainer=trainer, should_stop=should_stop,
                  log=stderr_lines("noise") if progress else None)


def _run_missing(spec: StudySpec, study: Any, *, run_dir: Path, trainer: Trainer,
                 progress: bool, stop: StopFlag | None = None,
                 interrupt: StopFlag | None = None) -> Tally:
    tally = Tally()
    done = rs.n_done(study)
    left = spec.study.n_trials - done
    if left <= 0 or (stop is not None and stop.is_set()):
        return tally
    bar = StudyProgress(name=spec.name, total=spec.study.n_trials, already_done=done,
                        enabled=progress)
    searcher = StudySearcher(study=study, spec=spec, model_args=resolve_model_args(spec),
                             n_to_run=left, tally=tally, on_change=bar, stopping=stop)
    try:
        _fit(spec, searcher, run_dir=run_dir, trainer=trainer, n_samples=left, stop=stop,
             interrupt=interrupt)
    finally:
        # However fit ended (Ctrl-C, SIGTERM or an error included), nothing stays RUNNING that
        # the storage can still record; if it cannot, `resume` reaps those trials.
        try:
            searcher.abandon_live()
        except Exception as e:
            if db.fault_of(e) is None:
                raise
        bar.close()
        # the trials' per-machine timing files: every timing is in the storage by now
        timing.forget_scope(searcher.timing_scope)
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
            with _keeping_sigterm_handler():
                ray.init(address=address, include_dashboard=False,
                         logging_level=logging.WARNING, log_to_driver=False)
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


@contextlib.contextmanager
def _keeping_sigterm_handler() -> Iterator[None]:
    """``ray.init`` replaces the process' SIGTERM handler with ``sys.exit``
    (ray-project/ray@01a29b09, python/ray/_private/worker.py, ``init``); put the caller's
    back, so SIGTERM stops a driver the way its application chose (the CLI: like Ctrl-C)."""
    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if main and before is not None:
            signal.signal(signal.SIGTERM, before)


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
         n_samples: int, stop: StopFlag | None = None,
         interrupt: StopFlag | None = None) -> None:
    # Ray's newer console output prints an experiment box even at verbose=0; the classic one
    # is silent there.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    # Ctrl-C raises KeyboardInterrupt here, as SIGTERM does in the CLI: Ray Tune's own handler
    # would wind the run down and return as if it had ended, which the caller cannot tell from
    # a study that stopped early.
    os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")
    tuner = tune.Tuner(
        tune.with_resources(
            tune.with_parameters(run_trial, job=_job(spec, searcher), trainer=trainer),
            {"cpu": spec.resources.cpus_per_trial, "gpu": spec.resources.gpus_per_trial}),
        tune_config=tune.TuneConfig(
            search_alg=searcher, scheduler=_scheduler(spec, searcher, interrupt),
            num_samples=n_samples,
            max_concurrent_trials=spec.study.max_concurrent,
            # One worker process serves many trials: saves a process start + imports each.
            reuse_actors=True),
        run_config=tune.RunConfig(
            name=f"attempt-{time.strftime('%Y%m%d-%H%M%S')}",
            storage_path=str((run_dir / "ray").resolve()), verbose=0,
            stop=_StopWhenSet(stop) if stop is not None else None,
            failure_config=tune.FailureConfig(max_failures=0)),
    )
    tuner.fit()


class StopFlag(Protocol):
    """What `run_study` polls to stop early (``threading.Event`` is one)."""

    def is_set(self) -> bool: ...


class _StopWhenSet(Stopper):
    """Stops every trial and the experiment once ``flag`` is set. Ray saves its run config in
    the experiment folder; the flag (a lock, in-process only) is not saved with it."""

    def __init__(self, flag: StopFlag | None) -> None:
        self._flag = flag

    def __call__(self, trial_id: str, result: dict) -> bool:
        return self.stop_all()

    def stop_all(self) -> bool:
        return self._flag is not None and self._flag.is_set()

    def __reduce__(self) -> tuple[Any, tuple[None]]:
        return (_StopWhenSet, (None,))


class _AnyOf:
    """A stop flag set when any of ``flags`` is (None entries ignored)."""

    def __init__(self, *flags: StopFlag | None) -> None:
        self._flags = [f for f in flags if f is not None]

    def is_set(self) -> bool:
        return any(f.is_set() for f in self._flags)


def _scheduler(spec: StudySpec, searcher: StudySearcher, interrupt: StopFlag | None) -> Any:
    p = spec.pruning
    limit_s = spec.resources.trial_timeout_s
    if p.scheduler == "none":
        sched: _Limits = _Fifo(searcher=searcher, limit_s=limit_s)
    else:
        sched = _BudgetASHA(max_t=spec.budget.tokens_per_trial, grace_period=p.grace_tokens,
                            reduction_factor=p.reduction_factor, searcher=searcher,
                            limit_s=limit_s)
    sched.interrupt = interrupt
    return sched


class _Limits:
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


class _Fifo(_Limits, FIFOScheduler):
    """First in, first out, with the trial bounds of `_Limits`."""

    def __init__(self, *, searcher: StudySearcher, limit_s: float) -> None:
        super().__init__()
        self._init_limits(searcher, limit_s)


class _BudgetASHA(_Limits, ASHAScheduler):
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


def _job(spec: StudySpec, searcher: StudySearcher) -> TrialJob:
    return TrialJob(model_args=searcher.model_args.to_dict(), corpus=spec.data.corpus,
                    vocab_size=spec.data.vocab_size,
                    max_corpus_bytes=max_corpus_bytes(spec.data),
                    tokenizer=spec.data.tokenizer, text_field=spec.data.text_field,
                    eod_token=spec.data.eod_token,
                    token_budget=spec.budget.tokens_per_trial,
                    eval_every_tokens=spec.budget.eval_every_tokens, seed=spec.study.seed,
                    cpus_per_trial=spec.resources.cpus_per_trial,
                    gpus_per_trial=spec.resources.gpus_per_trial)
