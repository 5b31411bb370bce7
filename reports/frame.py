"""Study → pandas DataFrame: one row per trial, everything a report or a spreadsheet needs.

Columns (prefixes keep names from colliding):
    number, state, outcome, feasible, pareto_rank, crowding, reason,
    objective.<name>   objective values in their own orientation (NaN when the trial has none),
    constraint.<name>  constraint values (feasible iff <= 0),
    param.<name>       the sampled parameters,
    duration_s, tokens, precision, fp8_emulated, seed, peak_memory_gb, peak_memory_method,
    tokens_per_s, val_loss, max_vio_batch, max_vio_val, loss_spikes, diverged,
    rerun_of           the interrupted trial this one re-runs, if any.

`pareto_rank` (1 = Pareto set) and `crowding` are computed over the feasible trials only; the
others have no rank.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
import pandas as pd

from reports.pareto import rank_and_crowd, to_minimization
from tuner import records

GIB = 1024**3  # peak_memory_gb is in GiB, as tuner.objectives defines it

METRIC_COLUMNS = ("tokens_per_s", "val_loss", "max_vio_batch", "max_vio_val", "loss_spikes",
                  "diverged")


@dataclass(frozen=True, kw_only=True)
class Objective:
    """One objective of a study, in the order of ``trial.values``."""

    name: str
    direction: str  # "minimize" | "maximize"

    @property
    def column(self) -> str:
        return f"objective.{self.name}"


def study_objectives(study: optuna.Study) -> list[Objective]:
    """Objectives from the study's OBJECTIVES attr, else its metric names and directions."""
    stored = study.user_attrs.get(records.OBJECTIVES)
    if stored:
        return [Objective(name=str(n), direction=str(d)) for n, d in stored]
    names = study.metric_names or [f"objective_{i}" for i in range(len(study.directions))]
    return [Objective(name=n, direction=d.name.lower())
            for n, d in zip(names, study.directions, strict=True)]


def trials_frame(study: optuna.Study, *,
                 trials: Sequence[optuna.trial.FrozenTrial] | None = None) -> pd.DataFrame:
    """One row per trial of `study` (or of the given `trials`, a snapshot of it).

    Example:
        >>> df = trials_frame(study)
        >>> df[df.pareto_rank == 1][["number", "objective.val_loss"]]
    """
    objectives = study_objectives(study)
    trials = list(study.get_trials(deepcopy=False) if trials is None else trials)
    rows = [_row(t, objectives) for t in trials]
    df = pd.DataFrame(rows, columns=_columns(rows, objectives))
    return _add_ranks(df, objectives)


def _columns(rows: list[dict[str, Any]], objectives: list[Objective]) -> list[str]:
    head = ["number", "state", "outcome", "feasible", "pareto_rank", "crowding", "reason"]
    head += [o.column for o in objectives]
    rest = sorted({k for r in rows for k in r if k.startswith("constraint.")})
    rest += sorted({k for r in rows for k in r if k.startswith("param.")})
    rest += ["duration_s", "tokens", "precision", "fp8_emulated", "seed", "peak_memory_gb",
             "peak_memory_method", *METRIC_COLUMNS, "rerun_of"]
    return head + rest


def _row(t: optuna.trial.FrozenTrial, objectives: list[Objective]) -> dict[str, Any]:
    metrics = t.user_attrs.get(records.METRICS) or {}
    recipe = t.user_attrs.get(records.RECIPE) or {}
    values = t.values if t.values is not None else [math.nan] * len(objectives)
    constraints = dict(t.constraints)
    row: dict[str, Any] = {
        "number": t.number,
        "state": t.state.name,
        "outcome": t.user_attrs.get(records.OUTCOME) or _outcome(t, constraints),
        "reason": t.user_attrs.get(records.REASON) or _reason(t, constraints),
        "duration_s": t.duration.total_seconds() if t.duration is not None else math.nan,
        "tokens": metrics.get("tokens_trained"),
        "precision": metrics.get("precision", recipe.get("precision", t.params.get("precision"))),
        "fp8_emulated": metrics.get("fp8_emulated"),
        "seed": t.user_attrs.get(records.SEED, metrics.get("seed", recipe.get("seed"))),
        "peak_memory_gb": _gb(metrics.get("peak_memory_bytes")),
        "peak_memory_method": metrics.get("peak_memory_method"),
        "rerun_of": t.user_attrs.get(records.RERUN_OF),
    }
    row.update({o.column: float(v) for o, v in zip(objectives, values, strict=True)})
    row.update({f"constraint.{k}": float(v) for k, v in constraints.items()})
    row.update({f"param.{k}": v for k, v in t.params.items()})
    row.update({k: _number(metrics.get(k)) for k in METRIC_COLUMNS})
    row["feasible"] = _feasible(t, constraints)
    return row


def _feasible(t: optuna.trial.FrozenTrial, constraints: dict[str, float]) -> bool:
    return (t.state == optuna.trial.TrialState.COMPLETE and t.values is not None
            and all(math.isfinite(v) for v in t.values)
            and all(v <= 0 for v in constraints.values()))


def _outcome(t: optuna.trial.FrozenTrial, constraints: dict[str, float]) -> str:
    if t.state == optuna.trial.TrialState.COMPLETE:
        return "infeasible" if any(v > 0 for v in constraints.values()) else "complete"
    return {"PRUNED": "pruned", "FAIL": "fail"}.get(t.state.name, t.state.name.lower())


def _reason(t: optuna.trial.FrozenTrial, constraints: dict[str, float]) -> str:
    violated = [f"constraint {k}: {v:.4g} > 0" for k, v in constraints.items() if v > 0]
    if violated:
        return "; ".join(violated)
    if t.state == optuna.trial.TrialState.COMPLETE:
        return ""
    return {"RUNNING": "still running", "WAITING": "waiting to start"}.get(
        t.state.name, f"{t.state.name.lower()} (no reason recorded)")


def _number(v: Any) -> Any:
    if isinstance(v, str):  # METRICS stores inf/NaN as strings
        try:
            return float(v)
        except ValueError:
            return v
    return v


def _gb(v: Any) -> float:
    v = _number(v)
    return float(v) / GIB if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan


def _add_ranks(df: pd.DataFrame, objectives: list[Objective]) -> pd.DataFrame:
    df["pareto_rank"] = pd.Series(pd.NA, index=df.index, dtype="Int64")
    df["crowding"] = np.nan
    feasible = df.index[df["feasible"].astype(bool)]
    if len(feasible):
        pts = to_minimization(df.loc[feasible, [o.column for o in objectives]].to_numpy(float),
                              [o.direction for o in objectives])
        ranks, crowd = rank_and_crowd(pts)
        df.loc[feasible, "pareto_rank"] = ranks
        df.loc[feasible, "crowding"] = crowd
    return df


def objective_columns(frame: pd.DataFrame) -> list[str]:
    """The ``objective.*`` columns of a frame, in objective order."""
    return [c for c in frame.columns if c.startswith("objective.")]


def ranked(frame: pd.DataFrame) -> pd.DataFrame:
    """Feasible trials in report order: Pareto rank, then larger crowding distance, then number."""
    feas = frame[frame["feasible"].astype(bool)].copy()
    feas["_crowd"] = -feas["crowding"].astype(float)
    return feas.sort_values(["pareto_rank", "_crowd", "number"]).drop(columns="_crowd")
