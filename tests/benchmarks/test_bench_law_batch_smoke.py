"""The batch-law benchmark's parts that need no trainings: the specs it writes from the shipped
`search_spaces/law.toml` (batch fixed or searched) validate as the product's, and its RESULTS
section renders from the committed benchmarks/law_batch.json."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import bench_law_batch as bench  # noqa: E402
from benchmarks.bench_law import spec_text  # noqa: E402


def test_the_design_is_the_shipped_law_toml():
    """Its budgets, trials and noise are the shipped law.toml's; its batch is its own (the
    shipped grid, law.batches, is not what it measures)."""
    from tuner.study.specs.spec import load_spec

    shipped = load_spec(ROOT / "search_spaces" / "law.toml")
    assert list(shipped.law.tokens) == bench.DESIGN["tokens"]
    assert shipped.law.held_out == bench.DESIGN["held_out"]
    assert shipped.study.n_trials == bench.DESIGN["trials"]
    assert shipped.study.noise_repeats == bench.DESIGN["noise_repeats"]


@pytest.mark.parametrize("batches", [[2], [1, 2, 4, 8, 16], [2, 4, 8, 16, 32, 64]])
def test_the_written_specs_fix_or_search_the_batch_as_asked(batches):
    from tuner.study.specs.spec import parse_spec

    spec = parse_spec(tomllib.loads(spec_text(bench.DESIGN | {"batches": batches}, 5)))
    assert spec.name == "law-s5" and spec.study.seed == 5
    assert list(spec.law.tokens) == bench.DESIGN["tokens"]
    assert spec.study.n_trials == bench.DESIGN["trials"]
    if len(batches) == 1:
        assert spec.space.names() == ("lr",)
        assert spec.space.fixed["batch_end"] == batches[0]
    else:
        assert set(spec.space.names()) == {"lr", "batch_end"}
        assert "batch_end" not in spec.space.fixed
        assert spec.space.largest("batch_end") == batches[-1]
    assert spec.space.fixed["precision"] == "fp32"


def test_the_committed_results_render_every_design():
    data = json.loads(bench.OUT.read_text())
    assert len(data) >= 2  # the batch fixed (as law.toml ships it) and searched
    for entry in data.values():
        text = "\n".join(bench.results_lines(entry))
        assert text.startswith("### batch_end ") and "| seed | budget (tokens) |" in text
        for d in entry["seeds"].values():
            assert len(d["budgets"]) >= 4
            assert all(b["best_by_batch"] for b in d["budgets"] if b["n_trials"])


def test_the_measured_gap_is_read_off_the_held_out_budget():
    """The predicted recipe against the best searched trial, both measured, in the budget's
    noise sd; the fitted minimum named when it lies over 2 sd below every trial."""
    budget = {"held_out": True, "noise_sd": 0.01, "best": {"loss": 1.50},
              "predicted_trial": {"loss": 1.49},
              "optimum": {"loss": 1.40, "tolerance": 0.02}}
    assert bench._measured_gap({"budgets": [budget]}) == (
        "-1.00 sd, -0.67% (fitted minimum 9.0 sd below every trial)")
    budget["optimum"]["loss"] = 1.485
    assert bench._measured_gap({"budgets": [budget]}) == "-1.00 sd, -0.67%"
    assert bench._measured_gap({"budgets": [budget | {"predicted_trial": {}}]}) == "—"
