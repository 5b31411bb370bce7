"""The one ranking of a study: Pareto ranks, crowding distance and the knee of the front.

Reports (the ranked table, the front they draw, the knee they mark), ``moetune status`` and
``moetune export --pick knee`` all call this module, so they agree by construction.

Array functions take objective values already oriented for minimisation (a maximised objective
multiplied by -1, see `to_minimization`), as an array of shape (N, M): N points, M objectives.
Ranks start at 1 (the Pareto set).

Knee: on the Pareto front, each objective normalised to [0, 1] over the front (0 = best), the
point farthest from the hyperplane through the front's per-objective best points, on the side
of the ideal point (the "maximum distance to the extremes' hyperplane" knee of Das, 1999,
"On characterizing the 'knee' of the Pareto curve", Struct. Optim. 18). When that is undefined
(one objective, at most M front points, dependent extremes, or no point strictly on the ideal
side), the front point nearest the ideal point (all zeros) is taken; ties go to the lowest
trial number.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from tuner.study.results.trial_record import Objective, TrialRecord


def to_minimization(values: np.ndarray, directions: Sequence[str]) -> np.ndarray:
    """Flip the sign of maximised objectives so that smaller is better everywhere.

    Args:
        values: (N, M) objective values.
        directions: M entries, each "minimize" or "maximize".
    """
    values = np.asarray(values, dtype=float).reshape(len(values), len(directions))
    signs = np.array([-1.0 if d == "maximize" else 1.0 for d in directions])
    flipped: np.ndarray = values * signs
    return flipped


def dominates(a: np.ndarray, b: np.ndarray) -> bool:
    """True when `a` is no worse than `b` in every objective and better in at least one."""
    return bool(np.all(a <= b) and np.any(a < b))


def nondominated_ranks(points: np.ndarray) -> np.ndarray:
    """Pareto rank of each point: 1 for the non-dominated set, 2 for the next front, ...

    Deb's fast non-dominated sort, O(M·N²). Duplicated points share a rank.

    Example:
        >>> nondominated_ranks(np.array([[1, 2], [2, 1], [2, 2], [3, 3]])).tolist()
        [1, 1, 2, 3]
    """
    points = np.asarray(points, dtype=float)
    n = len(points)
    ranks = np.zeros(n, dtype=int)
    if n == 0:
        return ranks
    # le_NN[i, j]: i no worse than j everywhere; lt_NN[i, j]: i better somewhere.
    le_NN = np.all(points[:, None, :] <= points[None, :, :], axis=2)
    lt_NN = np.any(points[:, None, :] < points[None, :, :], axis=2)
    dom_NN = le_NN & lt_NN  # dom_NN[i, j]: i dominates j
    n_dominators = dom_NN.sum(axis=0)
    front = np.flatnonzero(n_dominators == 0)
    rank = 1
    while front.size:
        ranks[front] = rank
        n_dominators = n_dominators - dom_NN[front].sum(axis=0)
        n_dominators[ranks > 0] = -1  # already ranked: never picked again
        front = np.flatnonzero(n_dominators == 0)
        rank += 1
    return ranks


def crowding_distance(points: np.ndarray) -> np.ndarray:
    """NSGA-II crowding distance of the points of ONE front (larger = more isolated).

    The two extremes of each objective get ``inf``; interior points get the sum over objectives
    of the normalised gap between their neighbours. An objective with zero range adds nothing.
    """
    points = np.asarray(points, dtype=float)
    n, m = points.shape if points.ndim == 2 else (len(points), 0)
    dist = np.zeros(n)
    if n <= 2:
        return np.full(n, np.inf)
    for k in range(m):
        order = np.argsort(points[:, k], kind="stable")
        col = points[order, k]
        span = col[-1] - col[0]
        dist[order[0]] = dist[order[-1]] = np.inf
        if span > 0:
            dist[order[1:-1]] += (col[2:] - col[:-2]) / span
    return dist


def rank_and_crowd(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pareto rank of every point and its crowding distance within its own front."""
    ranks = nondominated_ranks(points)
    crowd = np.zeros(len(ranks))
    for r in np.unique(ranks):
        members = np.flatnonzero(ranks == r)
        crowd[members] = crowding_distance(np.asarray(points, dtype=float)[members])
    return ranks, crowd


def knee_index(points: np.ndarray) -> int:
    """Index of the knee among ``points``, all of ONE front, minimisation-oriented (module
    docstring); the first of equals wins."""
    y = np.asarray(points, dtype=float)
    n, m = y.shape
    span = y.max(axis=0) - y.min(axis=0)
    z = (y - y.min(axis=0)) / np.where(span > 0, span, 1.0)  # 0 = best on each objective
    nearest_ideal = int(np.argmin(np.linalg.norm(z, axis=1)))
    if m < 2 or n <= m:
        return nearest_ideal
    extremes = z[np.argmin(z, axis=0)]  # (M, M): the best point of each objective
    try:  # the hyperplane n·x = 1 through the extremes; singular when they are dependent
        normal = np.linalg.solve(extremes, np.ones(m))
    except np.linalg.LinAlgError:
        return nearest_ideal
    dist = (1.0 - z @ normal) / np.linalg.norm(normal)  # > 0 on the ideal (origin) side
    best = int(np.argmax(dist))
    return best if dist[best] > 1e-12 else nearest_ideal


# -- over trial records ------------------------------------------------------------------------

def minimised(recs: Sequence[TrialRecord], objectives: Sequence[Objective]) -> np.ndarray:
    """(N, M) objective values of ``recs``, oriented for minimisation."""
    values = [[r.values[o.name] for o in objectives] for r in recs]
    return to_minimization(np.asarray(values, dtype=float).reshape(len(recs), len(objectives)),
                           [o.direction for o in objectives])


def pareto_front(recs: Sequence[TrialRecord],
                 objectives: Sequence[Objective]) -> list[TrialRecord]:
    """The non-dominated records among ``recs`` (give it feasible ones), in number order."""
    recs = sorted(recs, key=lambda r: r.number)
    if not recs:
        return []
    ranks = nondominated_ranks(minimised(recs, objectives))
    return [r for r, k in zip(recs, ranks, strict=True) if k == 1]


def knee(front: Sequence[TrialRecord], objectives: Sequence[Objective]) -> TrialRecord:
    """The knee of a Pareto front of records (module docstring)."""
    front = sorted(front, key=lambda r: r.number)
    return front[knee_index(minimised(front, objectives))]


def study_knee(recs: Sequence[TrialRecord],
               objectives: Sequence[Objective]) -> TrialRecord | None:
    """The knee of the study's front of feasible trials: what the report marks and what
    ``export --pick knee`` takes (None without a feasible trial)."""
    front = pareto_front([r for r in recs if r.feasible], objectives)
    return knee(front, objectives) if front else None
