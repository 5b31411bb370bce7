"""Study drivers as detached Ray actors.

Why detached actors and not Ray Jobs: a job is a shell command the Ray job server runs for
whoever can reach it, and that server has no authentication; nothing of it may be reachable
beyond loopback. An actor is started by this service alone, through its own Ray connection, runs
exactly `run_study` for one study, is named after the study (``moetune/study:<name>``) so a
restarted service finds it again, and as ``lifetime="detached"`` it outlives the HTTP process
that started it. It asks for no CPU: the trials it starts hold the cluster's resources.

A law study's driver runs every budget and a ladder's every rung, each an ordinary study in the
same storage (`_stages`). The driver reads everything from the storage (the spec, the stop
request) and writes the study's end state there; the service never needs the actor's return
value.
"""

from __future__ import annotations

import importlib
import logging
import traceback
from pathlib import Path
from typing import Any

import ray

from tuner.app.service.access.data_roots import check_spec_paths

NAMESPACE = "moetune"
log = logging.getLogger(__name__)


def actor_name(study: str) -> str:
    return f"study:{study}"


def run_driver(name: str, storage_url: str, root: str, trainer: str,
               data_roots: tuple[str, ...] = (), resolve: bool = True) -> str:
    """Drive study ``name`` to its end inside the actor; returns the end state, or
    `studies.STORAGE_UNREACHABLE` when the storage stopped answering (then the scheduler
    records the end once it answers again). With ``data_roots`` (the service's, and the
    shipped configs) every file the spec names is checked against them again before any is
    read (`data_roots.check_spec_paths`; ``resolve``: links followed)."""
    from tuner.app.requests.studies import (
        STORAGE_UNREACHABLE,
        TransitionError,
        service_record,
        set_state,
    )
    from tuner.app.service.running.faults import storage_down
    from tuner.study.run.preflight import prepare_stored
    from tuner.study.specs.spec import check_inputs
    from tuner.study.store.control import StorageStopFlag, stop_requested

    def check(spec: Any) -> None:
        if data_roots:  # a file swapped for a link out of the roots since submit is refused
            check_spec_paths(spec.to_dict(), [Path(r) for r in data_roots], resolve=resolve)
        check_inputs(spec)

    study = None
    try:
        # the stored spec parsed and its input files checked once, here, at the start
        with prepare_stored(name, run_dir=Path(root) / name, storage=storage_url,
                            check=check) as plan:
            study = plan.study
            assert study is not None  # prepare_stored loads the study or raises
            module, _, attr = trainer.partition(":")
            train = getattr(importlib.import_module(module), attr)
            if service_record(study)["state"] == "starting":  # not when a cancel came
                set_state(study, "running")
            finished = _stages(plan, storage_url, train, StorageStopFlag(study))
        if finished:
            state = "finished"
        else:
            state = "cancelled" if stop_requested(study) else "interrupted"
        set_state(study, state)
        return state
    except TransitionError:
        return "superseded"  # the scheduler moved the study meanwhile: its move stands
    except Exception as e:  # noqa: BLE001 - recorded against the study, which may be resumed
        lines = "".join(traceback.format_exception_only(e)).strip().splitlines()
        error = lines[-1] if lines else type(e).__name__
        if storage_down(e):
            log.warning("study %s: the storage stopped answering (%s); the driver ends",
                        name, type(e).__name__)
            error = f"{STORAGE_UNREACHABLE}: the driver ended; resume the study"
        if study is None and not storage_down(e):  # the preflight refused: say why
            study = _study_or_none(name, storage_url)
        if study is None:
            return STORAGE_UNREACHABLE if storage_down(e) else "failed"  # deleted, or no db
        try:
            set_state(study, "failed", error=error)
        except Exception as again:  # noqa: BLE001 - the driver ends either way
            log.warning("study %s: its failure could not be recorded (%s)", name,
                        type(again).__name__)
            return STORAGE_UNREACHABLE if storage_down(again) else "superseded"
        return "failed"


def _study_or_none(name: str, storage_url: str) -> Any:
    """The study ``name``, to record why its preflight failed; None if it cannot be read."""
    from tuner.study.store import database as db
    from tuner.study.store import storage as st

    try:
        return st.load_study(name, db.open_existing_storage(storage_url))
    except Exception:  # noqa: BLE001 - deleted, or the storage is gone: nothing to record on
        return None


def isolate_tune_registry() -> None:
    """Give this process's Ray Tune registry a key prefix of its own: the actor's id.

    Ray Tune keeps a registered trainable in the cluster's key-value store under the Ray job's
    id (``ray/tune/registry.py``, ``_Registry.prefix``, Ray 2.60.0). Every driver actor is in
    the service's job, so two drivers registering the same trainable overwrite each other, and
    one driver could run the other's trainable, whose arguments (``tune.with_parameters``
    object refs) die with the other driver: its trials ended with ``OwnerDiedError``. The
    registry is read by the driver that registered (the trial actors get the class itself), so
    a prefix per driver keeps each study's trials its own."""
    from ray.tune import registry

    registry._global_registry._prefix = ray.get_runtime_context().get_actor_id()


def _stages(plan: Any, storage_url: str, train: Any, stop: Any) -> bool:
    """Run the prepared study to its end, or a law's every budget or a ladder's every rung, in
    the one storage (`tuner.study.workflows.stage_runner.run_stages`, as the command line runs
    them); whether it reached its end (else a stop or a fault ended it early)."""
    from tuner.study.workflows.stage_runner import reached_end, run_stages

    runs = run_stages(plan.spec, run_dir=plan.run_dir, plan=plan, storage=storage_url,
                      trainer=train, progress=False, stop=stop, log=log.info)
    return reached_end(plan.spec, runs)


@ray.remote(num_cpus=0, max_restarts=0)
class StudyDriver:
    """One study's driver; it ends itself when the study ends."""

    def run(self, name: str, storage_url: str, root: str, trainer: str,
            data_roots: tuple[str, ...] = (), resolve: bool = True) -> str:
        isolate_tune_registry()
        try:
            return run_driver(name, storage_url, root, trainer, data_roots, resolve)
        finally:
            ray.actor.exit_actor()  # whatever happened: a driver never outlives its run


def start(name: str, *, storage_url: str, root: Path, trainer: str,
          data_roots: tuple[Path, ...] = (), resolve: bool = True) -> None:
    """Start the driver of study ``name`` (nothing if one is already running); ``data_roots``
    and ``resolve`` as `run_driver` takes them."""
    if is_running(name):
        return
    actor: Any = StudyDriver.options(  # type: ignore[attr-defined]  # ray's decorator
        name=actor_name(name), namespace=NAMESPACE, lifetime="detached").remote()
    actor.run.remote(name, storage_url, str(root), trainer, tuple(map(str, data_roots)),
                     resolve)


def is_running(name: str) -> bool:
    """Whether the driver actor of study ``name`` is alive."""
    try:
        ray.get_actor(actor_name(name), namespace=NAMESPACE)
    except ValueError:
        return False
    return True
