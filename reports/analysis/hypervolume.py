"""Exact hypervolume (minimisation) with a stated reference point.

The hypervolume of a set of points is the measure of the region they dominate, bounded by the
reference point. It is computed exactly by slicing along the last objective down to a 2-D sweep,
which is fast for the 2–3 objectives a study has. Points that do not strictly dominate the
reference point contribute nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tuner.study.results.ranking import nondominated_ranks

# Margin added beyond the worst observed value when the reference point is derived from the data.
REFERENCE_MARGIN = 0.1


@dataclass(frozen=True, kw_only=True)
class ReferencePoint:
    """A reference point (in the objectives' own orientation) and how it was chosen."""

    values: tuple[float, ...]
    how: str

    def describe(self, names: Sequence[str]) -> str:
        pairs = ", ".join(f"{n} = {v:.6g}" for n, v in zip(names, self.values, strict=True))
        return f"({pairs}); {self.how}"


def hypervolume(points: np.ndarray, reference: Sequence[float]) -> float:
    """Exact hypervolume dominated by `points` (minimisation) up to `reference`.

    Example:
        >>> hypervolume(np.array([[1.0, 3.0], [2.0, 2.0]]), [4.0, 4.0])
        5.0
    """
    ref = np.asarray(reference, dtype=float)
    pts = np.asarray(points, dtype=float).reshape(-1, len(ref))
    pts = pts[np.all(pts < ref, axis=1)]
    if len(pts) == 0:
        return 0.0
    pts = pts[nondominated_ranks(pts) == 1]
    return float(_slice(np.unique(pts, axis=0), ref))


def _slice(pts: np.ndarray, ref: np.ndarray) -> float:
    if pts.shape[1] == 1:
        return float(ref[0] - pts[:, 0].min())
    if pts.shape[1] == 2:
        return _sweep_2d(pts, ref)
    # Slabs between consecutive values of the last objective: each slab's cross-section is the
    # (M-1)-D hypervolume of the points at or below it.
    order = np.argsort(pts[:, -1], kind="stable")
    pts = pts[order]
    bounds = np.append(pts[:, -1], ref[-1])
    total = 0.0
    for i in range(len(pts)):
        depth = bounds[i + 1] - bounds[i]
        if depth > 0:
            total += depth * _slice(pts[: i + 1, :-1], ref[:-1])
    return total


def _sweep_2d(pts: np.ndarray, ref: np.ndarray) -> float:
    order = np.lexsort((pts[:, 1], pts[:, 0]))
    area, best_y = 0.0, ref[1]
    for x, y in pts[order]:
        if y < best_y:
            area += (ref[0] - x) * (best_y - y)
            best_y = y
    return area


def reference_from_data(points: np.ndarray, directions: Sequence[str], *,
                        scope: str = "in this snapshot") -> ReferencePoint:
    """Worst observed value of each objective pushed out by 10% of its range (1 if flat).

    `points` are in the objectives' own orientation; the result is too. `scope` says where the
    points came from, for the stated description.
    """
    pts = np.asarray(points, dtype=float).reshape(-1, len(directions))
    values = []
    for k, d in enumerate(directions):
        col = pts[:, k]
        span = float(col.max() - col.min()) or max(abs(float(col.max())), 1.0)
        worst = col.min() if d == "maximize" else col.max()
        step = REFERENCE_MARGIN * span
        values.append(float(worst - step if d == "maximize" else worst + step))
    how = (f"derived from the worst feasible value of each objective {scope}, "
           f"pushed out by {REFERENCE_MARGIN:.0%} of its range")
    return ReferencePoint(values=tuple(values), how=how)


def hypervolume_history(points: np.ndarray, reference: Sequence[float]) -> np.ndarray:
    """Hypervolume of the first k points for k = 1..N (points oriented for minimisation)."""
    pts = np.asarray(points, dtype=float)
    return np.array([hypervolume(pts[: k + 1], reference) for k in range(len(pts))])
