"""Hypervolume against hand-computed areas and volumes."""

from __future__ import annotations

import numpy as np
import pytest

from reports.analysis.hypervolume import hypervolume, hypervolume_history, reference_from_data


def test_two_objectives_hand_computed() -> None:
    # Staircase with ref (4, 4): [1,4]x[3,4] = 3, plus [2,4]x[2,3] = 2, plus [3,4]x[1,2] = 1.
    pts = np.array([[1.0, 3.0], [2.0, 2.0], [3.0, 1.0]])
    assert hypervolume(pts, [4.0, 4.0]) == pytest.approx(6.0)


def test_dominated_duplicate_and_outside_points_add_nothing() -> None:
    pts = np.array([[1.0, 3.0], [2.0, 2.0], [3.0, 1.0], [3.0, 3.0], [2.0, 2.0], [5.0, 0.0]])
    assert hypervolume(pts, [4.0, 4.0]) == pytest.approx(6.0)


def test_three_objectives_hand_computed() -> None:
    # Two boxes to ref (2,2,2): (0,1,1) → 2·1·1 = 2; (1,0,0) → 1·2·2 = 4; overlap
    # [1,2]x[1,2]x[1,2] = 1. Union = 5.
    pts = np.array([[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert hypervolume(pts, [2.0, 2.0, 2.0]) == pytest.approx(5.0)


def test_three_objectives_matches_monte_carlo() -> None:
    rng = np.random.default_rng(0)
    pts = rng.random((12, 3))
    ref = np.ones(3)
    samples = rng.random((200_000, 3))
    covered = (pts[None, :, :] <= samples[:, None, :]).all(axis=2).any(axis=1).mean()
    assert hypervolume(pts, ref) == pytest.approx(covered, abs=5e-3)


def test_history_is_monotone_and_ends_at_total() -> None:
    pts = np.array([[3.0, 1.0], [1.0, 3.0], [2.5, 2.5], [2.0, 2.0]])
    hist = hypervolume_history(pts, [4.0, 4.0])
    assert np.all(np.diff(hist) >= 0)
    assert hist[-1] == pytest.approx(hypervolume(pts, [4.0, 4.0]))
    assert hist[0] == pytest.approx(3.0)


def test_reference_from_data_is_beyond_the_worst_point_in_each_direction() -> None:
    pts = np.array([[1.0, 100.0], [3.0, 300.0]])
    ref = reference_from_data(pts, ["minimize", "maximize"])
    assert ref.values == pytest.approx((3.2, 80.0))
    assert "10%" in ref.how and "in this snapshot" in ref.how
