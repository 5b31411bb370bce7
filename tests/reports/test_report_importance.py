"""Importances come with their uncertainty at the study's n (a bootstrap over the trials, the
evaluator refitted each time); a parameter that never varied gets none."""

from __future__ import annotations

import math
import random

import pytest
from synthetic_studies import add, new_study

import reports
from reports.analysis.importance import param_importances, resample_count

SINGLE = [["val_loss", "minimize"]]


def lr_study(n: int, seed: int = 0, *, warmup: float | None = None):
    """val_loss depends on lr only (a bowl at lr = 1e-3) plus noise; warmup and precision not
    at all. ``warmup``: one fixed value in every trial."""
    rng = random.Random(seed)
    study = new_study(f"lr-{n}", objectives=SINGLE)
    for _ in range(n):
        lr = 10 ** rng.uniform(-4, -2)
        params = {"lr": lr, "warmup_fraction": rng.uniform(0, 0.2) if warmup is None else warmup,
                  "precision": rng.choice(["bf16", "fp8"])}
        add(study, values=[2.0 + (math.log10(lr) + 3) ** 2 + rng.gauss(0, 0.05)], params=params)
    return study


def width(imp, param: str) -> float:
    low, high = imp.interval("val_loss", param)
    return high - low


def test_the_interval_narrows_with_n():
    small = param_importances(reports.take_snapshot(lr_study(20)), resamples=60)
    large = param_importances(reports.take_snapshot(lr_study(160)), resamples=60)
    assert (small.n_trials, large.n_trials) == (20, 160)
    assert width(large, "lr") < 0.5 * width(small, "lr")
    assert width(large, "warmup_fraction") < 0.5 * width(small, "warmup_fraction")
    # at n = 160 the interval says lr matters and warmup does not
    assert large.interval("val_loss", "lr")[0] > large.interval("val_loss", "warmup_fraction")[1]
    for imp in (small, large):
        values = imp.values["val_loss"]
        assert sum(values.values()) == pytest.approx(1.0)
        for p, v in values.items():
            low, high = imp.interval("val_loss", p)
            assert low <= v <= high


def test_a_parameter_that_never_varied_gets_no_importance(tmp_path):
    study = lr_study(30, warmup=0.05)
    imp = param_importances(reports.take_snapshot(study))
    assert imp.unvaried == ["warmup_fraction"]
    assert set(imp.values["val_loss"]) == {"lr", "precision"}
    assert ("warmup_fraction never varied (one value in all 30 feasible trials): no importance"
            in " ".join(imp.notes))
    paths = reports.build(study, tmp_path)
    what = paths["ranked_md"].read_text().split("## What matters")[1].split("## fp8")[0]
    assert "| warmup_fraction |" not in what and "| lr |" in what
    assert "- warmup_fraction never varied (one value in all 30 feasible trials)" in what
    assert "warmup_fraction never varied" in paths["report_html"].read_text()


def test_the_report_shows_the_interval_and_says_the_resample_count(tmp_path):
    study = lr_study(40)
    paths = reports.build(study, tmp_path)
    md = paths["ranked_md"].read_text()
    imp = param_importances(reports.take_snapshot(study))
    assert imp.resamples == resample_count(40) == 100
    low, high = imp.interval("val_loss", "lr")
    cell = f"{imp.values['val_loss']['lr']:.4g} [{low:.4g}, {high:.4g}]"
    assert f"| lr | {cell} |" in md
    assert "mean over 100 bootstrap resamples of the trials (the evaluator refitted on each)" in md
    assert "mean over 100 bootstrap resamples" in paths["report_html"].read_text()
    again = param_importances(reports.take_snapshot(study))
    assert again.values == imp.values and again.low == imp.low  # a fixed seed: reproducible


def test_the_resample_count_is_bounded_by_the_work():
    assert [resample_count(n) for n in (2, 100, 200, 500, 10_000)] == [100, 100, 50, 20, 20]


def test_a_timed_objective_ranks_only_the_systems_knobs():
    # timed_tokens_per_s depends on batch and precision only; val_loss on lr. Before the
    # restriction, lr and warmup drew shares of the throughput's importance from the fit's noise.
    rng = random.Random(1)
    study = new_study("timed", objectives=[["val_loss", "minimize"],
                                           ["timed_tokens_per_s", "maximize"]])
    for _ in range(40):
        lr, batch = 10 ** rng.uniform(-4, -2), rng.choice([4, 8, 16, 32])
        precision = rng.choice(["bf16", "fp8"])
        speed = 1000.0 * batch ** 0.5 * (0.8 if precision == "fp8" else 1.0)
        add(study, values=[2.0 + (math.log10(lr) + 3) ** 2 + rng.gauss(0, 0.05), speed],
            params={"lr": lr, "warmup_fraction": rng.uniform(0, 0.2), "batch_end": batch,
                    "precision": precision})
    imp = param_importances(reports.take_snapshot(study), resamples=20)
    assert set(imp.values["timed_tokens_per_s"]) == {"batch_end", "precision"}
    assert set(imp.values["val_loss"]) == {"lr", "warmup_fraction", "batch_end", "precision"}
    assert ("timed_tokens_per_s does not depend on lr, warmup_fraction: not ranked for it."
            in imp.notes)


def test_a_modeled_cost_ranks_only_the_precision():
    rng = random.Random(2)
    study = new_study("modeled", objectives=[["val_loss", "minimize"],
                                             ["full_gpu_hours", "minimize"]])
    for _ in range(20):
        precision = rng.choice(["bf16", "fp8"])
        add(study, values=[2.0 + rng.random(), 3e6 if precision == "bf16" else 2.7e6],
            params={"lr": 10 ** rng.uniform(-4, -2), "warmup_fraction": rng.uniform(0, 0.2),
                    "precision": precision})
    imp = param_importances(reports.take_snapshot(study), resamples=20)
    assert imp.values["full_gpu_hours"] == {"precision": pytest.approx(1.0)}
