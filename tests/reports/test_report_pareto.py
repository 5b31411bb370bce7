"""Pareto ranks: the library against brute force, and trials.csv against its own columns."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from synthetic_studies import random_study

import reports
from tuner.study.results.ranking import crowding_distance, nondominated_ranks, rank_and_crowd


def brute_force_ranks(points: np.ndarray) -> list[int]:
    """Peel fronts: a point is in the current front if no remaining point dominates it."""
    remaining, ranks, rank = set(range(len(points))), [0] * len(points), 1
    while remaining:
        front = {i for i in remaining if not any(
            all(points[j] <= points[i]) and any(points[j] < points[i])
            for j in remaining if j != i)}
        for i in front:
            ranks[i] = rank
        remaining -= front
        rank += 1
    return ranks


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("m", [1, 2, 3])
def test_ranks_match_brute_force_with_ties(seed: int, m: int) -> None:
    rng = np.random.default_rng(seed)
    points = rng.integers(0, 5, size=(40, m)).astype(float)  # small integers: many ties
    assert nondominated_ranks(points).tolist() == brute_force_ranks(points)


def test_crowding_distance_hand_case() -> None:
    # One front of four points on a line; ranges 3 and 3.
    pts = np.array([[0.0, 3.0], [1.0, 2.0], [2.0, 1.0], [3.0, 0.0]])
    d = crowding_distance(pts)
    assert np.isinf(d[0]) and np.isinf(d[3])
    # Point 1: neighbours 0 and 2 → (2-0)/3 + (3-1)/3.
    assert d[1] == pytest.approx(4 / 3) and d[2] == pytest.approx(4 / 3)


def test_rank_and_crowd_orders_each_front_separately() -> None:
    pts = np.array([[0.0, 2.0], [2.0, 0.0], [1.0, 1.0], [3.0, 3.0]])
    ranks, crowd = rank_and_crowd(pts)
    assert ranks.tolist() == [1, 1, 1, 2]
    assert np.isinf(crowd[3])  # alone in its front


def test_trials_csv_ranks_equal_independent_recomputation(tmp_path) -> None:
    study = random_study(n=60, seed=3)
    paths = reports.build(study, tmp_path)
    df = pd.read_csv(paths["trials_csv"])
    directions = {"objective.val_loss": 1.0, "objective.peak_memory_gb": 1.0}
    feasible = df[(df["state"] == "COMPLETE")
                  & (df["constraint.max_peak_memory_gb"] <= 0)].reset_index(drop=True)
    assert feasible["feasible"].all() and (~df["feasible"]).sum() > 0
    points = feasible[list(directions)].to_numpy() * np.array(list(directions.values()))
    assert feasible["pareto_rank"].astype(int).tolist() == brute_force_ranks(points)
    # Everything else is unranked, and the Pareto set is exactly the non-dominated feasible rows.
    assert df.loc[~df["feasible"], "pareto_rank"].isna().all()
    pareto = set(feasible.loc[np.array(brute_force_ranks(points)) == 1, "number"])
    assert set(df.loc[df["pareto_rank"] == 1, "number"]) == pareto


def test_maximized_objective_is_ranked_the_right_way(tmp_path) -> None:
    from synthetic_studies import add, new_study
    study = new_study("maxi", objectives=[["val_loss", "minimize"], ["tokens_per_s", "maximize"]])
    add(study, values=[3.0, 100.0])  # dominated: slower and worse
    add(study, values=[2.5, 200.0])
    add(study, values=[2.0, 50.0])
    df = reports.trials_frame(study)
    assert df.set_index("number")["pareto_rank"].to_dict() == {0: 2, 1: 1, 2: 1}
