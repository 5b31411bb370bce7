"""Warm start: another study's finished trials, added to a new study so its sampler sees them.

A study at a larger proxy or budget can begin where a smaller one ended: ``[start] warm_start =
"small"`` copies every trial of study ``small`` that trained to the end and whose parameters
are a point of this study's space into this study, as finished trials (Optuna's
``create_trial`` and ``add_trials``). TPE and GP then model them from the first proposal (they
count as startup trials), so the first proposals already lean toward the other study's best
region.

Each copy is scored by this study's spec (`tuner.study.results.outcome.decide` on the other study's
stored result, recipe and model): the measured objectives are the values measured there, a
modeled one is modeled for this spec's ``[full_run]``, and this spec's constraints decide which
copies the sampler learns to avoid. A copy is never feasible here (`trial_record.is_feasible`):
it was measured at another proxy or budget, so it is never ranked, on a front, the knee,
exported or counted toward ``n_trials``; ORIGIN (``warm_start:<study>``) marks it and the report
says how many there are.

Where the other study is: ``[start] warm_start_storage`` if set; else, for a study in the
default sqlite file of its run folder, the other study's run folder next to it
(``runs/<other>/study.db``); else the same storage. The storage is recorded with its password
masked (`tuner.study.store.database.shown`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from search_spaces.loader import SearchSpace
from trainers import ModelArgs, Recipe, TrainResult
from tuner.study.results.outcome import TrialReport, decide
from tuner.study.results.trial_record import is_warm_start, study_objectives
from tuner.study.specs.metrics import names_timed
from tuner.study.specs.spec import SpecError, StudySpec
from tuner.study.specs.start_spec import contains
from tuner.study.store import database as db
from tuner.study.store import records
from tuner.study.store import storage as st

# a copy gets these anew; the rest of the other trial's attributes are copied as they are
NOT_COPIED = (records.OUTCOME, records.REASON, records.REASONS, records.ORIGIN,
              records.START_POINT, records.RERUN_OF, records.WARM_START_OF)


class WarmStartError(SpecError):
    """``[start] warm_start`` names no usable study: absent, elsewhere, or other objectives."""


@dataclass(frozen=True, kw_only=True)
class WarmSource:
    """The study to warm-start from, opened, and where it is (password masked)."""

    study: optuna.Study
    storage_shown: str


def source_url(spec: StudySpec, *, url: str, run_dir: Path) -> str:
    """Where the other study is (module docstring). ``url``: this study's storage."""
    if spec.start.warm_start_storage:
        return spec.start.warm_start_storage
    if url == db.storage_url(run_dir):  # the default: a sqlite file per run folder
        return db.storage_url(run_dir.parent / spec.start.warm_start)
    return url


def open_source(spec: StudySpec, *, url: str, run_dir: Path) -> WarmSource:
    """Open the study to warm-start from and check that its objectives are this spec's.
    Writes nothing (no database is created by looking).

    Raises:
        WarmStartError: no such study there, a storage that cannot be read, other objectives.
    """
    name = spec.start.warm_start
    src = source_url(spec, url=url, run_dir=run_dir)
    where = "start.warm_start_storage" if spec.start.warm_start_storage else "start.warm_start"
    try:
        store = db.open_existing_storage(src, where)
        found = st.find_study(name, store)
        if found is None:
            raise LookupError(f"it holds {sorted(db.study_names(store))}")
        study = found
    except (LookupError, db.StorageError, st.SchemaError) as e:
        why = str(e).removeprefix(f"{where}: ")
        raise WarmStartError(f"start.warm_start: must name a study to warm-start from in "
                             f"{db.shown(src)} ({why}), but got {name!r}.") from None
    theirs = [(o.name, o.direction) for o in study_objectives(study)]
    ours = [tuple(o) for o in spec.objectives]
    if sorted(theirs) != sorted(ours):
        raise WarmStartError(f"start.warm_start: study {name!r} optimises {theirs}, this spec "
                             f"{ours}; the objectives must match (names and directions), or "
                             "its trials would teach the sampler another problem.")
    return WarmSource(study=study, storage_shown=db.shown(src))


def add_warm_trials(study: optuna.Study, spec: StudySpec, source: WarmSource) -> dict[str, Any]:
    """Copy ``source``'s fitting trials into ``study`` (each at most once) and say what was
    added and why the others were skipped (stored as START's ``warm_start``)."""
    name = spec.start.warm_start
    have = {(a.get("study"), a.get("trial")) for t in study.get_trials(deepcopy=False)
            if isinstance(a := t.user_attrs.get(records.WARM_START_OF), dict)}
    new: list[FrozenTrial] = []
    skipped: Counter[str] = Counter()
    for t in source.study.get_trials(deepcopy=False):
        if (name, t.number) in have:
            continue
        copy, why = warm_copy(t, spec, name)
        if copy is None:
            skipped[why] += 1
        else:
            new.append(copy)
    study.add_trials(new)
    return {"study": name, "storage": source.storage_shown, "added": len(new) + len(have),
            "skipped": dict(skipped)}


def warm_copy(t: FrozenTrial, spec: StudySpec, name: str) -> tuple[FrozenTrial | None, str]:
    """``t`` of study ``name`` as a finished trial of this study, or None and why not."""
    attrs = t.user_attrs
    if t.state != TrialState.COMPLETE:
        return None, f"not finished ({t.state.name.lower()})"
    if is_warm_start(attrs.get(records.ORIGIN)):
        return None, "itself a warm-start trial there"
    if not fits(t.params, spec.space):
        return None, "parameters outside this study's space"
    try:
        result = TrainResult.from_dict({**attrs[records.METRICS],
                                        "eval_curve": attrs.get(records.EVAL_CURVE) or [],
                                        "train_curve": attrs.get(records.TRAIN_CURVE) or []})
        recipe = Recipe.from_dict(attrs[records.RECIPE])
        model_args = ModelArgs.from_dict(attrs[records.MODEL_ARGS])
    except (KeyError, TypeError, ValueError):
        return None, "no measured result (out of memory, timed out, or recorded without one)"
    timed = attrs.get(records.TIMING)  # its signature's timing there, measured alone
    if names_timed(spec) and not timed:
        # scored without one, a timed objective would take its worst value and teach the
        # sampler that this recipe is slow
        return None, "no timing of its systems signature (that study timed none)"
    try:
        outcome = decide(TrialReport(status="ok", result=result.to_dict()), spec=spec,
                         recipe=recipe, model_args=model_args, timing=timed or None)
    except ValueError as e:
        return None, f"this spec cannot score it ({e})"
    kept = {k: v for k, v in attrs.items() if k not in NOT_COPIED}
    dists = spec.space.distributions()
    return optuna.trial.create_trial(
        state=TrialState.COMPLETE, values=list(outcome.values or ()), params=dict(t.params),
        distributions={k: dists[k] for k in t.params},
        user_attrs={**kept, records.OUTCOME: records.WARM_START, records.REASON: outcome.reason,
                    records.REASONS: [r.to_list() for r in outcome.reasons],
                    records.ORIGIN: f"{records.WARM_START}:{name}",
                    records.WARM_START_OF: {"study": name, "trial": t.number}},
        constraints=dict(outcome.constraints)), ""


def fits(params: dict[str, Any], space: SearchSpace) -> bool:
    """Whether ``params`` is a point this space's sampler could have proposed: every value one
    its parameter can take, and exactly the parameters the space samples under those values
    (a copy lacking one would make TPE and GP drop that parameter from their model)."""
    dists = {p.name: p.distribution for p in space.params}
    if not set(params) <= set(dists) or not all(contains(dists[k], v)
                                                 for k, v in params.items()):
        return False
    values: dict[str, Any] = dict(space.fixed)
    for p in space.params:
        active = p.active(values)
        if active != (p.name in params):
            return False
        if active:
            values[p.name] = params[p.name]
    return True
