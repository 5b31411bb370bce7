"""Run a study to ``n_trials``: Optuna study on storage + Ray Tune trials + ASHA, resumable.

`run_study` is what ``moetune submit`` and ``moetune resume`` call. It takes the study's lease
(one driver per study, `tuner.study.store.lease`), creates (or loads) the study by name, reaps
trials a dead driver left RUNNING, and runs only what is missing, so a killed driver followed by a
resume ends with exactly ``n_trials`` counted trials.

With ``[study] noise_repeats`` set, a study that reaches ``n_trials`` then re-trains its top
trials with other seeds (Ray tasks, ``max_concurrent`` at once) and stores the spread of val_loss
(`tuner.study.results.noise`); those runs are not trials and never count toward ``n_trials``.

Bounds on a trial: the scheduler ends a trial that runs past ``resources.trial_timeout_s``
(its worker is killed, so even a trial stuck in native code ends) and tells the searcher which
trials Ray's memory monitor killed; both end infeasible with their reason, and the study goes
on. A storage that fails mid-study ends the run with `database.StorageFault` (one line).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray import tune

from trainers import train
from tuner.study.run import resume as rs
from tuner.study.run.noise_retrain import measure_noise
from tuner.study.run.preflight import Found, Plan, prepare
from tuner.study.run.start import begin
from tuner.study.specs.spec import StudySpec
from tuner.study.store import database as db
from tuner.study.store import lease as ls
from tuner.study.store import storage as st
from tuner.study.store.control import StorageStopFlag
from tuner.study.trial import timing
from tuner.study.trial.cluster import ray_cluster
from tuner.study.trial.progress import StudyProgress, stderr_lines
from tuner.study.trial.samplers import make_sampler
from tuner.study.trial.schedulers import AnyOf, StopFlag, StopWhenSet, make_scheduler
from tuner.study.trial.searcher import StudySearcher, Tally
from tuner.study.trial.trainable import run_trial
from tuner.study.trial.training import Trainer, Training, study_training


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
              interrupt: StopFlag | None = None, found: Found | None = None) -> StudySummary:
    """`preflight.prepare` and `run` in one call: run ``spec`` until its study counts
    ``n_trials`` finished trials (``resume``: continue the study if it exists).

    Raises:
        What `prepare` and `run` raise. Not ``resume`` and the study exists: FileExistsError.
    """
    with prepare(spec, run_dir=run_dir, storage=storage, resume=resume, found=found) as plan:
        return run(plan, trainer=trainer, address=address, progress=progress, stop=stop,
                   interrupt=interrupt)


def run(plan: Plan, *, trainer: Trainer = train, address: str | None = None,
        progress: bool = True, stop: StopFlag | None = None,
        interrupt: StopFlag | None = None) -> StudySummary:
    """Run the prepared study until it counts ``n_trials`` finished trials.

    Args:
        trainer: a function with `trainers.train`'s signature (tests inject fakes here).
        address: Ray cluster to join; default: the running Ray, else a new local one.
        stop: once set (e.g. a ``threading.Event`` set by the service's cancel), no trial
            starts and the running ones are stopped and recorded as interrupted, so a resume
            re-runs exactly them.
        interrupt: once set (the CLI's Ctrl-C and SIGTERM handler), KeyboardInterrupt is
            raised at the next step of Ray Tune's loop (a safe point: never inside a storage
            write), in-flight trials are recorded as interrupted and the lease is released.

    Raises:
        cluster.ClusterError: Ray unreachable, or no node can host a trial (nothing written
            then). lease.LeaseHeld: a new study's lease is held (another driver created it
            meanwhile). FileExistsError: another driver created the study meanwhile.
        database.StorageFault: the storage failed while the study ran.
        lease.LeaseLost: another driver took the lease over while this one ran.
    """
    spec, url, run_dir = plan.spec, plan.url, plan.run_dir
    # Ray first: a cluster that is unreachable or too small must leave nothing written.
    with ray_cluster(address, spec):
        run_dir.mkdir(parents=True, exist_ok=True)
        store = plan.store or db.open_storage(url)
        try:
            lost = plan.hold_lease(store)
            # a readable copy of the spec (its storage password masked, as stored)
            (run_dir / "spec.json").write_text(json.dumps(spec.to_dict(), indent=2) + "\n")
            study = _open_study(plan, store)
            begin(study, spec, points=plan.points, source=plan.source)
            reaped = tuple(rs.reap_interrupted(study, store))
            gone = db.FileGone(url)
            # a stop asked through the storage (`moetune cancel`, the service's cancel) of this
            # study or, for a law's budget or a ladder's rung, of the law or ladder it is part of
            asked = [StorageStopFlag(study)]
            base = st.stage_base(spec)
            if base != spec.name:
                asked.append(StorageStopFlag(st.load_study(base, store)))
            stopping = AnyOf(stop, lost, gone, *asked)
            tally = _run_missing(plan, study, trainer=trainer, progress=progress,
                                 stop=stopping, interrupt=interrupt)
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


def _open_study(plan: Plan, store: Any) -> Any:
    """Create the study, or continue the one the preflight loaded: finish its creation (its
    creating driver died before recording the spec), migrate it, record a changed spec (the
    preflight checked the change), and give it a sampler seeded for the trials it holds, so a
    resume continues the proposal sequence instead of replaying it (`samplers.sampler_seed`)."""
    spec, study = plan.spec, plan.study
    if study is None:
        return st.create_study(spec, store, make_sampler(spec))
    if plan.stored is None:
        st.finish_creation(study, spec)
    st.migrate(study)
    if plan.stored is not None and plan.stored.to_dict() != spec.to_dict():
        st.update_stored_spec(study, spec)
    study.sampler = make_sampler(spec, n_existing=len(study.get_trials(deepcopy=False)))
    return study


def _measure_noise(spec: StudySpec, study: Any, *, trainer: Trainer, progress: bool,
                   stop: StopFlag, interrupt: StopFlag | None) -> None:
    """`noise.measure_noise` once the trials are done (Ray Tune's trials have ended, so the
    re-trainings, Ray tasks with a trial's resources, have the trials' cores). Polled while
    they run: ``stop`` cancels them and stores nothing, ``interrupt`` raises KeyboardInterrupt
    as during the trials."""
    def should_stop() -> bool:
        if interrupt is not None and interrupt.is_set():
            raise KeyboardInterrupt
        return stop.is_set()

    measure_noise(study, spec, trainer=trainer, should_stop=should_stop,
                  log=stderr_lines("noise") if progress else None, on_ray=True)


def _run_missing(plan: Plan, study: Any, *, trainer: Trainer, progress: bool,
                 stop: StopFlag | None = None, interrupt: StopFlag | None = None) -> Tally:
    spec = plan.spec
    tally = Tally()
    done = rs.n_done(study)
    left = spec.study.n_trials - done
    if left <= 0 or (stop is not None and stop.is_set()):
        return tally
    bar = StudyProgress(name=spec.name, total=spec.study.n_trials, already_done=done,
                        enabled=progress)
    searcher = StudySearcher(study=study, spec=spec, model_args=plan.model_args,
                             n_to_run=left, tally=tally, on_change=bar, stopping=stop)
    try:
        _fit(spec, searcher, run_dir=plan.run_dir, trainer=trainer, n_samples=left, stop=stop,
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
            search_alg=searcher, scheduler=make_scheduler(spec, searcher, interrupt),
            num_samples=n_samples,
            max_concurrent_trials=spec.study.max_concurrent,
            # One worker process serves many trials: saves a process start + imports each.
            reuse_actors=True),
        run_config=tune.RunConfig(
            name=f"attempt-{time.strftime('%Y%m%d-%H%M%S')}",
            storage_path=str((run_dir / "ray").resolve()), verbose=0,
            stop=StopWhenSet(stop) if stop is not None else None,
            failure_config=tune.FailureConfig(max_failures=0)),
    )
    tuner.fit()


def _job(spec: StudySpec, searcher: StudySearcher) -> Training:
    """The `Training` every trial of the study shares; each trial puts in its own recipe."""
    return study_training(spec, model_args=searcher.model_args.to_dict())

