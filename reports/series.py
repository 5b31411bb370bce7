"""Plot data shared by the HTML and PNG renderers, so both always show the same numbers."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import pandas as pd

from reports.analysis.frame import ranked
from reports.analysis.snapshot import Snapshot
from reports.ranked import recipe_line
from tuner.study.store import records

MAX_CURVES = 8  # more lines than this are unreadable


@dataclass(frozen=True, kw_only=True)
class Curve:
    trial: int
    label: str
    tokens: list[float]
    val_loss: list[float]


def objective_pairs(snapshot: Snapshot) -> list[tuple[int, int]]:
    """Every pair of objective indices, for the Pareto front plots."""
    return list(itertools.combinations(range(len(snapshot.objectives)), 2))


def with_values(snapshot: Snapshot) -> pd.DataFrame:
    """Finished trials that have finite objective values (feasible or not), with a hover text.
    Warm-start trials are left out: another study measured them, at its proxy and budget."""
    df = snapshot.frame
    cols = [o.column for o in snapshot.objectives]
    own = df["outcome"] != records.WARM_START
    done = df[(df["state"] == "COMPLETE") & own & df[cols].notna().all(axis=1)].copy()
    done["hover"] = [_hover(r, snapshot) for _, r in done.iterrows()]
    return done


def _hover(row: pd.Series, snapshot: Snapshot) -> str:
    vals = " · ".join(f"{o.name}={row[o.column]:.4g}" for o in snapshot.objectives)
    rank = "infeasible: " + str(row["reason"]) if not row["feasible"] else \
        f"Pareto rank {row['pareto_rank']}"
    return f"trial #{row['number']} ({rank})<br>{vals}<br>{recipe_line(row)}"


def front_title(snapshot: Snapshot) -> str:
    """The Pareto figure's title: one front per pair of objectives (singular for one pair), or,
    when one feasible trial is best on every objective, that there is no trade-off to draw."""
    df = with_values(snapshot)
    front = df[(df["pareto_rank"] == 1).fillna(False).astype(bool)] if not df.empty else df
    if len(front) == 1:
        return (f"Pareto front: one trial, #{int(front['number'].iloc[0])}, is best on every "
                "objective (no trade-off)")
    return "Pareto front" if len(objective_pairs(snapshot)) == 1 else "Pareto fronts"


def pareto_curves(snapshot: Snapshot) -> list[Curve]:
    """EVAL_CURVE of the best-ranked feasible trials (the Pareto set, at most MAX_CURVES)."""
    top = ranked(snapshot.frame)
    if len(snapshot.objectives) > 1:
        top = top[top["pareto_rank"] == 1]
    recs = snapshot.records_by_number
    out = []
    for _, row in top.head(MAX_CURVES).iterrows():
        points = recs[row["number"]].eval_curve
        finite = [(float(x), y) for x, y in points if math.isfinite(y)]
        if finite:
            out.append(Curve(trial=int(row["number"]), label=f"#{row['number']}",
                             tokens=[p[0] for p in finite], val_loss=[p[1] for p in finite]))
    return out


def balance(snapshot: Snapshot) -> pd.DataFrame:
    """MaxVio (batch and validation) and loss spikes of every trial that reported metrics."""
    df = snapshot.frame
    cols = ["max_vio_batch", "max_vio_val", "loss_spikes"]
    has = df[cols].apply(pd.to_numeric, errors="coerce").notna().any(axis=1)
    has &= df["outcome"] != records.WARM_START  # measured by another study
    out: pd.DataFrame = df.loc[has, ["number", "outcome", *cols]].copy()
    out[cols] = out[cols].apply(pd.to_numeric, errors="coerce")
    return out.sort_values("number")
