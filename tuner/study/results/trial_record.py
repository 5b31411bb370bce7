"""The typed trial record: one Optuna `FrozenTrial` of a moetune study, read once, as the rest of
moetune sees it. Reports, export, status and validation read trials only through this.

`tuner.study.store.records` says what each stored attribute holds; this module is its reader, with
the one definition of a study's objectives and the one definition of *feasible*:

    feasible  ⇔  state COMPLETE, every objective value finite, every constraint value <= 0,
                 and measured by this study (not a warm-start trial)

(Optuna's convention: a constraint value <= 0 is satisfied.) Infeasible trials keep worst-case
stand-in values so the sampler can learn from them; they are never ranked, picked or plotted as
results. A warm-start trial (ORIGIN ``warm_start:<study>``) was measured in another study, at
another proxy or budget: the sampler sees it, but here it is never feasible, so never ranked,
picked, plotted or counted toward ``n_trials``.

    >>> recs = trial_records(study)  # doctest: +SKIP
    >>> [r.number for r in recs if r.feasible]  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from trainers.config.model_args import ModelArgs
from trainers.config.recipe import Recipe
from trainers.result import is_usable, to_float
from tuner.study.results.reasons import Reason, from_lists, join_text, parse_reason_text
from tuner.study.specs.metrics import TIMED
from tuner.study.store import records


@dataclass(frozen=True, kw_only=True)
class Objective:
    """One objective of a study, in the order of ``trial.values``."""

    name: str
    direction: str  # "minimize" | "maximize"

    @property
    def column(self) -> str:
        """Its column in a trials table (`reports.analysis.frame`)."""
        return f"objective.{self.name}"


def study_objectives(study: optuna.Study) -> list[Objective]:
    """The study's objectives: its OBJECTIVES attribute, else Optuna's metric names and
    directions (a plain Optuna study)."""
    stored = study.user_attrs.get(records.OBJECTIVES)
    if stored:
        return [Objective(name=str(n), direction=str(d)) for n, d in stored]
    names = study.metric_names or [f"objective_{i}" for i in range(len(study.directions))]
    return [Objective(name=n, direction=d.name.lower())
            for n, d in zip(names, study.directions, strict=True)]


def is_feasible(state: TrialState, values: Sequence[float] | None,
                constraints: Mapping[str, float], *, warm_start: bool = False) -> bool:
    """The one feasibility rule (module docstring)."""
    return (not warm_start and state == TrialState.COMPLETE and values is not None
            and all(is_usable(v) for v in values)
            and all(v <= 0.0 for v in constraints.values()))


@dataclass(frozen=True, kw_only=True)
class TrialRecord:
    """One trial as stored, decoded (inf/NaN strings back to floats, reasons typed)."""

    number: int
    state: TrialState
    outcome: str
    reasons: tuple[Reason, ...]
    values: dict[str, float]  # objective name -> value, in objective order; {} if none
    constraints: dict[str, float]
    params: dict[str, Any]
    feasible: bool
    metrics: dict[str, Any] = field(default_factory=dict)  # as stored (see `metric`)
    recipe_dict: dict[str, Any] = field(default_factory=dict)
    model_args_dict: dict[str, Any] = field(default_factory=dict)
    eval_curve: list[tuple[int, float]] = field(default_factory=list)
    train_curve: list[tuple[int, float]] = field(default_factory=list)
    seed: int | None = None
    corpus_hash: str | None = None
    device: str = ""
    rerun_of: int | None = None
    duration_s: float = math.nan
    origin: str = ""  # records.ORIGIN: "enqueued", "baseline:<name>", "warm_start:<study>"
    # records.TIMING: the timing of the trial's systems signature ({} in an untimed study)
    timing: dict[str, Any] = field(default_factory=dict)

    @property
    def warm_start(self) -> bool:
        """Copied from another study for the sampler: never ranked, picked or counted here."""
        return is_warm_start(self.origin)

    @property
    def reason(self) -> str:
        """The reasons as one line of text."""
        return join_text(self.reasons)

    @property
    def trained(self) -> bool:
        """Finished training with a recipe and model on record (what export and validate need)."""
        return (self.state == TrialState.COMPLETE and bool(self.recipe_dict)
                and bool(self.model_args_dict))

    @functools.cached_property
    def recipe(self) -> Recipe:
        return Recipe.from_dict(self.recipe_dict)

    @functools.cached_property
    def model_args(self) -> ModelArgs:
        return ModelArgs.from_dict(self.model_args_dict)

    def metric(self, name: str) -> float:
        """A metric's value: the objective if the study optimised it, else the measured value
        in METRICS, or in TIMING for a timed metric (NaN when absent)."""
        if name in self.values:
            return self.values[name]
        if name in TIMED and self.timing:
            return to_float(self.timing.get("tokens_per_s"))
        return to_float(self.metrics.get(name))

    @property
    def token_budget(self) -> int:
        """Tokens the proxy trained on (its budget; 0 if not recorded)."""
        v = to_float(self.metrics.get("token_budget") or self.metrics.get("tokens_trained"), 0.0)
        return int(v) if math.isfinite(v) else 0


def trial_record(t: FrozenTrial, objectives: Sequence[Objective]) -> TrialRecord:
    """Decode one FrozenTrial."""
    attrs = t.user_attrs
    constraints = {str(k): float(v) for k, v in dict(t.constraints).items()}
    # a stored value beyond trainers.result.MAX_MAGNITUDE reads as NaN: it cannot break a plot
    values = {o.name: float(v) if is_usable(float(v)) else math.nan
              for o, v in zip(objectives, t.values or (), strict=False)}
    reasons = _reasons(t, constraints)
    return TrialRecord(
        number=t.number, state=t.state, outcome=str(attrs.get(records.OUTCOME)
                                                    or _outcome(t.state, constraints)),
        reasons=reasons, values=values, constraints=constraints, params=dict(t.params),
        feasible=is_feasible(t.state, t.values, constraints,
                             warm_start=is_warm_start(attrs.get(records.ORIGIN))),
        metrics=dict(attrs.get(records.METRICS) or {}),
        recipe_dict=dict(attrs.get(records.RECIPE) or {}),
        model_args_dict=dict(attrs.get(records.MODEL_ARGS) or {}),
        eval_curve=_curve(attrs.get(records.EVAL_CURVE)),
        train_curve=_curve(attrs.get(records.TRAIN_CURVE)),
        seed=attrs.get(records.SEED), corpus_hash=attrs.get(records.CORPUS_HASH),
        device=str(attrs.get(records.DEVICE) or ""), rerun_of=attrs.get(records.RERUN_OF),
        duration_s=t.duration.total_seconds() if t.duration is not None else math.nan,
        origin=str(attrs.get(records.ORIGIN) or ""),
        timing=dict(attrs.get(records.TIMING) or {}))


def is_warm_start(origin: object) -> bool:
    """Whether a trial's ORIGIN says another study measured it
    (`tuner.study.run.warm_start`)."""
    return isinstance(origin, str) and origin.startswith(records.WARM_START + ":")


def trial_records(study: optuna.Study, *,
                  trials: Sequence[FrozenTrial] | None = None) -> list[TrialRecord]:
    """Every trial of ``study`` (or the given snapshot of its ``trials``), in number order."""
    objectives = study_objectives(study)
    trials = study.get_trials(deepcopy=False) if trials is None else trials
    return [trial_record(t, objectives) for t in sorted(trials, key=lambda t: t.number)]


def _curve(points: Any) -> list[tuple[int, float]]:
    return [(int(a), to_float(b)) for a, b in (points or [])]


def _outcome(state: TrialState, constraints: Mapping[str, float]) -> str:
    """The outcome of a trial recorded without one (a plain Optuna study)."""
    if state == TrialState.COMPLETE:
        return "infeasible" if any(v > 0 for v in constraints.values()) else "complete"
    return {TrialState.PRUNED: "pruned", TrialState.FAIL: "fail"}.get(state, state.name.lower())


def _reasons(t: FrozenTrial, constraints: Mapping[str, float]) -> tuple[Reason, ...]:
    stored = t.user_attrs.get(records.REASONS)
    if stored is not None:
        return from_lists(stored)
    text = t.user_attrs.get(records.REASON)
    if text:  # schema 1
        return parse_reason_text(str(text))
    violated = tuple(Reason(kind="constraint", subject=k, detail=f"{v:.4g} > 0")
                     for k, v in constraints.items() if v > 0)
    if violated or t.state == TrialState.COMPLETE:
        return violated
    words = {TrialState.RUNNING: "still running", TrialState.WAITING: "waiting to start"}
    return (Reason(kind="other",
                   detail=words.get(t.state, f"{t.state.name.lower()} (no reason recorded)")),)
