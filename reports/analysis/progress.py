"""How the search progressed: hypervolume over trials (multi-objective) or best-so-far (single).

The hypervolume reference point is pinned once per snapshot (or given by the caller) and stated
next to every figure that uses it, so the curve's growth is the search's and not the reference's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from reports.analysis.hypervolume import ReferencePoint, hypervolume_history, reference_from_data
from reports.analysis.snapshot import Snapshot
from tuner.study.results.ranking import to_minimization


@dataclass(frozen=True, kw_only=True)
class Progress:
    """`value[i]` after trial `trial_numbers[i]` (feasible trials, in trial-number order)."""

    kind: str  # "hypervolume" | "best"
    trial_numbers: list[int]
    values: list[float]
    reference: ReferencePoint | None


def feasible_points(snapshot: Snapshot) -> tuple[list[int], np.ndarray]:
    """Trial numbers and objective values (own orientation) of the feasible trials."""
    df = snapshot.frame
    feas = df[df["feasible"].astype(bool)].sort_values("number")
    cols = [o.column for o in snapshot.objectives]
    return feas["number"].tolist(), feas[cols].to_numpy(float)


def progress(snapshot: Snapshot, *, reference: Sequence[float] | None = None) -> Progress:
    """Hypervolume history for 2+ objectives, best-so-far for one; empty with no feasible trial."""
    numbers, pts = feasible_points(snapshot)
    directions = [o.direction for o in snapshot.objectives]
    if len(directions) == 1:
        best = pts[:, 0]
        best = np.maximum.accumulate(best) if directions[0] == "maximize" else \
            np.minimum.accumulate(best)
        return Progress(kind="best", trial_numbers=numbers, values=best.tolist(), reference=None)
    if not numbers:
        return Progress(kind="hypervolume", trial_numbers=[], values=[], reference=None)
    ref = pinned_reference(pts, directions, reference)
    hv = hypervolume_history(to_minimization(pts, directions),
                             to_minimization(np.array([ref.values]), directions)[0])
    return Progress(kind="hypervolume", trial_numbers=numbers, values=hv.tolist(), reference=ref)


def pinned_reference(points: np.ndarray, directions: Sequence[str],
                     reference: Sequence[float] | None, *,
                     scope: str = "in this snapshot") -> ReferencePoint:
    """The caller's reference point if given, else one derived from `points`."""
    if reference is not None:
        if len(reference) != len(directions):
            raise ValueError(f"reference point: must have one value per objective "
                             f"({len(directions)}), but got {list(reference)!r}.")
        if not all(np.isfinite(float(v)) for v in reference):  # NaN compares false: HV = 0
            raise ValueError(f"reference point: every value must be a finite number, but got "
                             f"{list(reference)!r}.")
        return ReferencePoint(values=tuple(float(v) for v in reference), how="given by the user")
    return reference_from_data(points, directions, scope=scope)
