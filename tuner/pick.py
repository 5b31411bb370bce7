"""Choose the trial to export from a study in storage: best loss, the Pareto knee, or trial N.

Reads exactly what `tuner.records` says a study keeps. Only trials that finished training are
candidates: Optuna state COMPLETE with the RECIPE and MODEL_ARGS attributes. ``best-loss`` and
``knee`` consider feasible trials only (every constraint <= 0); ``trial N`` takes any such trial
and says when it is infeasible.

Knee: on the Pareto front of the study's objectives, each objective normalised to [0, 1] over
the front (maximised ones flipped), the point farthest from the line (for m objectives the
hyperplane) through the front's per-objective extremes, on the side of the ideal point. When
that is undefined (one objective, fewer than m+1 front points, degenerate extremes, or no point
strictly on the ideal side), the front point nearest the ideal point (all zeros) is taken.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from trainers.model_args import ModelArgs
from trainers.recipe import Recipe
from tuner import records
from tuner.hardware import GIB

PICKS = ("best-loss", "knee", "trial")


@dataclass(frozen=True, kw_only=True)
class Pick:
    """What to export. ``trial`` is required for kind ``trial``; limits filter candidates by
    the proxy's *measured* metrics (peak memory in GiB, tokens per second)."""

    kind: str = "best-loss"
    trial: int | None = None
    max_memory_gb: float | None = None
    min_tokens_per_s: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in PICKS:
            raise ValueError(f"pick: must be one of {PICKS}, but got pick={self.kind!r}.")
        if self.kind == "trial" and self.trial is None:
            raise ValueError("pick: 'trial' needs a trial number (--pick trial N).")


@dataclass(frozen=True, kw_only=True)
class TrialRecord:
    """One finished trial as the export needs it."""

    number: int
    values: dict[str, float]
    recipe: Recipe
    model_args: ModelArgs
    metrics: dict[str, Any]
    feasible: bool
    outcome: str

    def metric(self, name: str) -> float:
        """A metric value: the objective if the study optimised it, else from METRICS."""
        if name in self.values:
            return self.values[name]
        v = self.metrics.get(name)
        return float(v) if v is not None else math.nan  # "inf" strings parse too


@dataclass(frozen=True, kw_only=True)
class Picked:
    record: TrialRecord
    how: str  # one sentence: which rule chose it among how many candidates


def objectives_of(study: optuna.Study) -> list[tuple[str, str]]:
    """``[(name, direction), ...]`` from the study attrs (fallback: Optuna's own)."""
    stored = study.user_attrs.get(records.OBJECTIVES)
    if stored:
        return [(str(n), str(d)) for n, d in stored]
    names = study.metric_names or [f"objective_{i}" for i in range(len(study.directions))]
    return [(n, "maximize" if d == optuna.study.StudyDirection.MAXIMIZE else "minimize")
            for n, d in zip(names, study.directions, strict=True)]


def _record(t: FrozenTrial, objectives: list[tuple[str, str]]) -> TrialRecord:
    values = dict(zip([n for n, _ in objectives], t.values or [], strict=False))
    return TrialRecord(
        number=t.number, values={k: float(v) for k, v in values.items()},
        recipe=Recipe.from_dict(t.user_attrs[records.RECIPE]),
        model_args=ModelArgs.from_dict(t.user_attrs[records.MODEL_ARGS]),
        metrics=dict(t.user_attrs.get(records.METRICS, {})),
        feasible=all(v <= 0.0 for v in t.constraints.values()),
        outcome=str(t.user_attrs.get(records.OUTCOME, "complete")))


def finished_trials(study: optuna.Study) -> list[TrialRecord]:
    """COMPLETE trials that carry a recipe and model args, in trial-number order."""
    objectives = objectives_of(study)
    return [_record(t, objectives) for t in study.get_trials(deepcopy=False)
            if t.state == TrialState.COMPLETE and records.RECIPE in t.user_attrs
            and records.MODEL_ARGS in t.user_attrs]


def within_limits(r: TrialRecord, pick: Pick) -> bool:
    if pick.max_memory_gb is not None:
        mem = float(r.metrics.get("peak_memory_bytes", math.inf)) / GIB
        if not mem <= pick.max_memory_gb:
            return False
    if pick.min_tokens_per_s is not None:
        if not float(r.metrics.get("tokens_per_s", 0.0)) >= pick.min_tokens_per_s:
            return False
    return True


def _minimised(records_: list[TrialRecord], objectives: list[tuple[str, str]]) -> np.ndarray:
    cols = [[(-1.0 if d == "maximize" else 1.0) * r.values[n] for n, d in objectives]
            for r in records_]
    return np.asarray(cols, dtype=float).reshape(len(records_), len(objectives))


def pareto_front(records_: list[TrialRecord],
                 objectives: list[tuple[str, str]]) -> list[TrialRecord]:
    """Non-dominated records (all objectives considered, directions respected)."""
    y = _minimised(records_, objectives)
    keep = []
    for i in range(len(records_)):
        dominated = np.any(np.all(y <= y[i], axis=1) & np.any(y < y[i], axis=1))
        if not dominated:
            keep.append(records_[i])
    return keep


def knee(front: list[TrialRecord], objectives: list[tuple[str, str]]) -> TrialRecord:
    """The knee of a Pareto front (definition in the module docstring)."""
    y = _minimised(front, objectives)
    span = y.max(axis=0) - y.min(axis=0)
    z = (y - y.min(axis=0)) / np.where(span > 0, span, 1.0)  # 0 = best on each objective
    nearest_ideal = front[int(np.argmin(np.linalg.norm(z, axis=1)))]
    m = len(objectives)
    if m < 2 or len(front) <= m:
        return nearest_ideal
    extremes = z[np.argmin(z, axis=0)]  # (m, m): the best point of each objective
    # hyperplane n·x = 1 through the extremes; singular when they are not independent
    try:
        normal = np.linalg.solve(extremes, np.ones(m))
    except np.linalg.LinAlgError:
        return nearest_ideal
    dist = (1.0 - z @ normal) / np.linalg.norm(normal)  # > 0 on the ideal (origin) side
    best = int(np.argmax(dist))
    return front[best] if dist[best] > 1e-12 else nearest_ideal


def pick_trial(study: optuna.Study, pick: Pick) -> Picked:
    """Apply ``pick`` to ``study``.

    Raises:
        LookupError: no trial qualifies (the message says why).
    """
    done = finished_trials(study)
    if pick.kind == "trial":
        match = [r for r in done if r.number == pick.trial]
        if not match:
            raise LookupError(f"trial {pick.trial}: not a finished trial of study "
                              f"{study.study_name!r}; finished: {[r.number for r in done]}.")
        r = match[0]
        state = "feasible" if r.feasible else "INFEASIBLE (a constraint is violated)"
        return Picked(record=r, how=f"trial {r.number} as requested ({state})")
    feasible = [r for r in done if r.feasible]
    objectives = objectives_of(study)
    if pick.kind == "best-loss":
        pool = [r for r in feasible if within_limits(r, pick)]
        pool = [r for r in pool if math.isfinite(r.metric("val_loss"))]
        if not pool:
            raise LookupError(_none_left(study, done, feasible, pick))
        r = min(pool, key=lambda x: (x.metric("val_loss"), x.number))
        return Picked(record=r, how=f"lowest val_loss among {len(pool)} feasible trials "
                                    f"within limits")
    front = [r for r in pareto_front(feasible, objectives) if within_limits(r, pick)] \
        if feasible else []
    if not front:
        raise LookupError(_none_left(study, done, feasible, pick))
    r = knee(front, objectives)
    return Picked(record=r, how=f"knee of the Pareto front ({len(front)} points within limits "
                                f"over {[n for n, _ in objectives]})")


def _none_left(study: optuna.Study, done: list[TrialRecord], feasible: list[TrialRecord],
               pick: Pick) -> str:
    return (f"study {study.study_name!r}: no trial to export ({len(done)} finished, "
            f"{len(feasible)} feasible, limits max_memory_gb={pick.max_memory_gb}, "
            f"min_tokens_per_s={pick.min_tokens_per_s}).")
