"""The pooled-law benchmark's parts that need no trainings: its simulation and lack-of-fit level
at toy size, and its RESULTS section rendered from the committed benchmarks/law_pooled.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import bench_law_pooled as bench  # noqa: E402


def test_the_simulation_and_the_level_run_at_toy_size():
    rows = bench.simulate(n=2)
    assert {(r["sd"], r["fit"]) for r in rows} == {(sd, fit) for sd in (0.03, 0.07)
                                                   for fit in ("pooled", "line")}
    assert all(0 <= r["coverage"] <= 1 and r["mean_error_x"] >= 1 for r in rows)
    level = bench.lack_of_fit_level(n=3)
    assert len(level) == 6 and all(0 <= r["rejected"] <= 1 for r in level)


def test_the_committed_results_render_every_table():
    data = json.loads(bench.OUT.read_text())
    text = "\n".join(bench.results_lines(data))
    assert "| noise sd | fit | studies |" in text and "Lack-of-fit test" in text
    assert "**Real trainings**" in text and "**Bytes against BPE**" in text
    # every real seed has both fits, and the pooled rows say what they left out
    for seed in (0, 1, 2):
        rows = [r for r in data["real"] if r["seed"] == seed and r["budgets"] == "all 4 budgets"]
        assert {r["fit"] for r in rows} == {"pooled", "line"}
        assert next(r for r in rows if r["fit"] == "pooled")["left_out"] is not None
