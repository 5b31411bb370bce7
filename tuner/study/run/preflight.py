"""Everything a run checks before its first trial, done once: the preflight.

`prepare` takes a parsed spec (``moetune submit``; ``moetune resume`` and the service's driver
pass the study's stored one) and returns a `Plan`: the storage URL and, when the study exists,
its one storage handle, the study as loaded, its lease (taken here, held until the plan
closes) and the resume rules checked; the proxy's model args, the start points and the
warm-start source resolved; the warnings a user should read. `tuner.study.run.runner.run` runs
the plan. The CLI's submit and resume, each stage of a ladder or a law, and the service's
driver all come through here, so each check has one home and runs once per process:

====================  ==============================================================
check                 where
====================  ==============================================================
spec parsed           by the caller (`load_spec`, `storage.stored_spec`): the plan
                      takes the result
input files           by the caller, once (`check_inputs`)
storage opened        here for an existing study; by the run for a new one (its
                      sqlite file is created only once Ray is up)
resume rules          here (`resume.check_resume_spec`), when the study exists
lease                 taken here for an existing study, by the run for a new one
warm-start source     here, unless the study already recorded its start
start points, proxy   here
====================  ==============================================================

A plan is a context manager: leaving it releases the lease it holds.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from trainers.config.model_args import ModelArgs
from tuner.study.run import resume as rs
from tuner.study.run import warm_start as ws
from tuner.study.run.start import StartPoint, start_points
from tuner.study.specs.metrics import LOAD_DEPENDENT, constraint_target, load_warning
from tuner.study.specs.proxy import resolve_model_args
from tuner.study.specs.spec import SpecError, StudySpec
from tuner.study.store import database as db
from tuner.study.store import lease as ls
from tuner.study.store import records
from tuner.study.store import storage as st


class StoredSpecError(SpecError):
    """A study's stored spec breaks a rule of this moetune (an older one stored it)."""


@dataclass(frozen=True, eq=False)
class Found:
    """An existing study its caller has already loaded, with its stored spec parsed (a law's
    stages: `tuner.study.workflows.law.law_stages`), so its preflight loads and parses neither
    again."""

    store: optuna.storages.RDBStorage
    study: optuna.Study
    stored: StudySpec


@dataclass(kw_only=True, eq=False)
class Plan:
    """A study ready to run (`prepare`); use it in a ``with`` block."""

    spec: StudySpec
    run_dir: Path
    url: str  # the storage URL (shown masked: `db.shown`)
    store: optuna.storages.RDBStorage | None  # open when the study exists
    study: optuna.Study | None  # the existing study, as loaded; None for a new one
    stored: StudySpec | None  # its stored spec (None: new, or its creator died before it)
    model_args: ModelArgs
    points: tuple[StartPoint, ...]
    source: ws.WarmSource | None
    warnings: tuple[str, ...]  # the start points' clip notes (`load_warnings` come first)
    lost: threading.Event | None = None  # set when the lease held here is lost
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    @property
    def resume(self) -> bool:
        """Whether the run continues an existing study."""
        return self.study is not None

    def __enter__(self) -> Plan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release what the plan holds (its lease)."""
        self._stack.close()

    def found(self) -> Found | None:
        """The existing study as this preflight loaded it, with its stored spec, for a caller
        that reads it again (a law's first stage); None for a new or unfinished one."""
        if self.study is None or self.store is None or self.stored is None:
            return None
        return Found(self.store, self.study, self.stored)

    def hold_lease(self, store: optuna.storages.RDBStorage) -> threading.Event:
        """The study's lease, taken now if the plan does not hold it yet (a new study: the run
        takes it once it has created the storage); the event is set if it is lost."""
        if self.lost is None:
            self.lost = self._stack.enter_context(ls.held(store.engine, self.spec.name))
        return self.lost


def prepare(spec: StudySpec, *, run_dir: Path, storage: str = "", resume: bool = False,
            where: str = "", found: Found | None = None) -> Plan:
    """The preflight of ``spec`` (module docstring). Writes nothing but the lease row of a
    study that exists.

    Args:
        storage: database URL (beats the spec's); default: ``run_dir/study.db``.
        resume: continue the study if it exists (else an existing one is refused).
        where: the name the storage URL is reported under (a CLI flag); default: the field.
        found: study ``spec.name`` as its caller loaded it from this URL's storage, if it did.

    Raises:
        FileExistsError: the study exists and not ``resume``. database.StorageError: an
            unusable storage URL. storage.SchemaError: a study of a newer moetune.
        resume.ResumeSpecError: ``spec`` changes more than `resume.RESUMABLE_CHANGES`.
        lease.LeaseHeld: another live driver runs the study.
        warm_start.WarmStartError: ``[start] warm_start`` names no usable study.
    """
    url = db.storage_url(run_dir, storage, spec.study.storage)
    where = where or ("--storage" if storage else "study.storage")
    db.check_url(url, where)
    if found is not None and found.study.study_name != spec.name:
        raise ValueError(f"found study {found.study.study_name!r} is not {spec.name!r}")
    store, study = (found.store, found.study) if found is not None \
        else _existing(spec.name, url, where)
    if study is not None and not resume:
        raise FileExistsError(f"study {spec.name!r} already exists in {db.shown(url)}; pass "
                              "--resume to continue it, or choose another name.")
    plan = Plan(spec=spec, run_dir=run_dir, url=url, store=store, study=study, stored=None,
                model_args=resolve_model_args(spec), points=(), source=None, warnings=())
    try:
        if study is not None and store is not None:
            plan.lost = plan._stack.enter_context(ls.held(store.engine, spec.name))
            if st.is_complete(study):
                plan.stored = found.stored if found is not None else st.stored_spec(study)
                rs.check_resume_spec(plan.stored, spec)
        _resolve_start(plan)
    except BaseException:
        plan.close()
        raise
    return plan


def prepare_stored(name: str, *, run_dir: Path, storage: str = "",
                   check: Any = None) -> Plan:
    """The preflight of study ``name`` as stored (``moetune resume``, the service's driver):
    its stored spec, parsed once, is the spec; ``check(spec)``, if given, runs the input-file
    checks on it before the lease is taken.

    Raises:
        LookupError: no such study (or no database). And as `prepare`, bar FileExistsError;
        storage.IncompleteStudy: its creating driver died before storing its spec.
    """
    url = db.storage_url(run_dir, storage)
    try:
        store = db.open_existing_storage(url, "--storage" if storage else "study.storage")
    except LookupError as e:
        raise LookupError(f"no study {name!r}: {e}") from None
    study = st.find_study(name, store)
    if study is None:
        raise LookupError(f"no study {name!r} in {db.shown(url)}; it holds "
                          f"{sorted(db.study_names(store))}.")
    try:
        spec = st.stored_spec(study)
    except SpecError as e:  # e.g. stored by an older moetune whose rules have since changed
        raise StoredSpecError(f"study {name!r}: its stored spec no longer validates: {e}"
                              ) from None
    if check is not None:
        check(spec)
    plan = Plan(spec=spec, run_dir=run_dir, url=url, store=store, study=study, stored=spec,
                model_args=resolve_model_args(spec), points=(), source=None, warnings=())
    try:
        plan.lost = plan._stack.enter_context(ls.held(store.engine, name))
        _resolve_start(plan)
    except BaseException:
        plan.close()
        raise
    return plan


def _resolve_start(plan: Plan) -> None:
    """The plan's start points, their clip notes and, unless the study already recorded its
    start, the study to warm-start from (opened once, here)."""
    plan.points = tuple(start_points(plan.spec, plan.model_args))
    started = plan.study is not None and records.START in plan.study.user_attrs
    if plan.spec.start.warm_start and not started:
        plan.source = ws.open_source(plan.spec, url=plan.url, run_dir=plan.run_dir)
    plan.warnings = tuple(clip_notes(plan.points))


def _existing(name: str, url: str, where: str
              ) -> tuple[optuna.storages.RDBStorage | None, optuna.Study | None]:
    """(storage, study) when the database at ``url`` holds ``name``; (storage, None) when it
    exists without it; (None, None) when there is no database (none is created by looking)."""
    try:
        store = db.open_existing_storage(url, where)
    except LookupError:
        return None, None
    return store, st.find_study(name, store)


def load_warnings(spec: StudySpec) -> list[str]:
    """A line for each objective or constraint on a load-dependent metric
    (`metrics.LOAD_DEPENDENT`), which measures the machine's load as much as the recipe: the
    spec alone says so, before any preflight."""
    roles = [(name, "objective") for name, _ in spec.objectives]
    roles += [(constraint_target(key)[0], "constraint") for key, _ in spec.constraints]
    return ([load_warning(name, role) for name, role in roles if name in LOAD_DEPENDENT]
            + law_step_warnings(spec))


MIN_LAW_STEPS = 50  # below it a budget's optimum bent the law (benchmarks/RESULTS.md)
# below it the held-out batch's bowl may be too flat to judge: at 64 steps two estimators of its
# lr* disagreed, at 320 they agreed (benchmarks/RESULTS.md, "The held-out batch at the held-out
# budget")
MIN_HELD_OUT_BATCH_STEPS = 200


def law_step_warnings(spec: StudySpec) -> list[str]:
    """A line for each fitted law budget whose trials at the space's largest batch make fewer
    than `MIN_LAW_STEPS` optimizer steps: such a budget is mostly warmup, and its lr optimum
    sits in another regime than the larger budgets' (measured: a 16-step budget's optimum,
    placed, steepened a law's exponent from -0.45 to -0.66 and its held-out prediction missed
    by 2.9x); and one for a held-out batch of fewer than `MIN_HELD_OUT_BATCH_STEPS` steps."""
    if not spec.law.on:
        return []
    tokens_per_step = spec.space.largest("batch_end") * spec.space.largest("seq_len")
    out = []
    for i, tokens in enumerate(spec.law.tokens):
        steps = tokens // tokens_per_step
        if steps < MIN_LAW_STEPS:
            out.append(f"law.tokens[{i}] = {tokens}: {steps} optimizer steps at the largest "
                       f"batch ({tokens_per_step} tokens per step); a budget under "
                       f"{MIN_LAW_STEPS} steps is mostly warmup and its lr optimum bends the "
                       "law: start the budgets higher")
    law = spec.law
    if law.held_out_batch:
        steps = law.held_out_batch_at // (law.held_out_batch * spec.space.largest("seq_len"))
        if steps < MIN_HELD_OUT_BATCH_STEPS:
            out.append(f"law.held_out_batch = {law.held_out_batch}: {steps} optimizer steps at "
                       f"its budget ({law.held_out_batch_at} tokens); under "
                       f"{MIN_HELD_OUT_BATCH_STEPS} its bowl may be too flat to place lr* (at 64 "
                       "steps two estimators differed 1.9-2.6x, at 320 they agreed within 1.4x)"
                       + (': run it at the held-out budget (law.held_out_batch_budget = '
                          '"held_out")' if law.held_out and law.held_out_batch_budget != "held_out"
                          else ""))
    return out


def spec_warnings(spec: StudySpec, points: Sequence[StartPoint] | None = None) -> list[str]:
    """What a valid spec should still reconsider, one line each (none stops the study): its
    `load_warnings`, then what a ``[start]`` baseline had clipped to the space (the notes of
    ``points``, the study's start points; computed here when not given).
    """
    if points is None:
        points = start_points(spec, resolve_model_args(spec)) if spec.start.baselines else []
    return load_warnings(spec) + clip_notes(points)


def clip_notes(points: Sequence[StartPoint]) -> list[str]:
    """What the start points had clipped to the space, one line each."""
    return [n for p in points for n in p.notes]
