"""Non-dominated sorting and crowding distance, for any number of objectives.

Every function here takes objective values already oriented for minimisation (a maximised
objective multiplied by -1, see `to_minimization`), as an array of shape (N, M): N points, M
objectives. Ranks start at 1 (the Pareto set).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def to_minimization(values: np.ndarray, directions: Sequence[str]) -> np.ndarray:
    """Flip the sign of maximised objectives so that smaller is better everywhere.

    Args:
        values: (N, M) objective values.
        directions: M entries, each "minimize" or "maximize".
    """
    values = np.asarray(values, dtype=float).reshape(len(values), len(directions))
    signs = np.array([-1.0 if d == "maximize" else 1.0 for d in directions])
    return values * signs


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
