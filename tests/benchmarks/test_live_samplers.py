"""The live sampler comparison's analysis: best val_loss by share of the tokens, the pooled noise
band from the studies' re-runs, the verdict against it, and its own RESULTS.md subsection.
(The trainings themselves are the benchmark; `live_samplers.py --smoke` runs a tiny one.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.search import live_samplers as ls  # noqa: E402

N = 8


def _study(space: str, method: str, seed: int, losses: list[float], reruns: list[float]
           ) -> dict:
    best, curve = float("inf"), []
    for k, x in enumerate(losses, 1):
        best = min(best, x)
        curve.append([k * 1000, best])
    top = min(range(N), key=lambda i: losses[i])
    return {"space": space, "method": method, "seed": seed,
            "sampler": "random" if method == "random" else "gp", "startup_trials": 3,
            "knobs": ["lr"], "space_def": {"params": {}, "fixed": {}},
            "trials": [{"number": i, "state": "COMPLETE", "feasible": True, "val_loss": x,
                        "params": {"lr": 1e-3, "precision": "fp8" if i % 2 else "bf16"},
                        "duration_s": 2.0 if i % 2 else 1.0, "reason": ""}
                       for i, x in enumerate(losses)],
            "best_curve": curve,
            "noise": {"trials": [top], "runs": [{"trial": top, "seed": seed + j + 1,
                                                 "val_loss": v} for j, v in enumerate(reruns)]},
            "wall_s": 10.0, "trial_span_s": 9.0, "load_avg_before": [1.0, 1.0, 1.0],
            "load_avg_after": [1.5, 1.0, 1.0], "date": "2026-11-30 12:00"}


def _data(auto_final: float, random_final: float, spread: float) -> dict:
    studies = {}
    for seed in range(3):
        for m, final in (("auto", auto_final), ("random", random_final)):
            losses = [4.0, 3.8, 3.6, 3.5, 3.4, 3.3, 3.2, final]
            studies[f"quickstart/{m}/{seed}"] = _study(
                "quickstart", m, seed, losses, [final + spread, final - spread])
    return {"config": ls.CONFIG | {"n_trials": N, "tokens_per_trial": 1000},
            "command": "x", "machine": {"machine": "x86_64", "cores": 2, "torch": "t"},
            "studies": studies}


def test_best_at_reads_the_curve_at_the_share_of_tokens() -> None:
    rec = _study("quickstart", "auto", 0, [5, 4, 6, 3, 7, 7, 2, 8], [2, 2])
    assert [ls.best_at(rec, f) for f in ls.FRACTIONS] == [4, 3, 2]


def test_a_gap_beyond_the_pooled_noise_is_a_win_and_one_within_it_a_tie() -> None:
    clear = ls.summarise(_data(2.9, 3.1, 0.01))["quickstart"]
    assert clear["noise_sd"] == pytest.approx(0.01, rel=1e-6)
    assert clear["noise_runs"] == 18
    assert clear["verdict"] == "default better"
    assert clear["paired"] == {"auto_better": 3, "tied": 0, "random_better": 0}
    assert clear["methods"]["auto"]["best_at"]["0.25"] == [3.8, 3.8, 3.8]

    noisy = ls.summarise(_data(2.9, 3.1, 0.5))["quickstart"]
    assert noisy["verdict"] == "tie"
    assert noisy["paired"]["tied"] == 3

    worse = ls.summarise(_data(3.1, 2.9, 0.01))["quickstart"]
    assert worse["verdict"] == "random better"
    assert worse["median_gap"] == pytest.approx(-0.2)


def test_the_subsection_goes_before_parallel_efficiency_and_is_replaced_in_place(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results = tmp_path / "RESULTS.md"
    results.write_text("# R\n\n## Search efficiency\n\nintro\n\n### Parallel efficiency "
                       "(live study, measured)\n\np\n\n## Next\n\nn\n")
    monkeypatch.setattr(ls, "RESULTS", results)
    data = _data(2.9, 3.1, 0.01)
    lines = ls.results_lines(data, ls.summarise(data))
    ls.write_results(lines)
    ls.write_results(lines)
    text = results.read_text()
    assert text.count(ls.HEADING) == 1
    assert text.index("intro") < text.index(ls.HEADING) < text.index("### Parallel") \
        < text.index("## Next")
    assert "**quickstart** (yes;" in text and "the default lower beyond the noise" in text
    assert "(measured)" in ls.HEADING


def test_every_study_of_a_space_runs_the_space_of_its_first_study() -> None:
    first = _study("quickstart", "auto", 0, [3.0] * N, [3.0, 3.0]) | {
        "date": "2026-11-30 12:00", "space_def": {"params": {"lr": {}}, "fixed": {}}}
    later = _study("quickstart", "random", 0, [3.0] * N, [3.0, 3.0]) | {
        "date": "2026-11-30 13:00", "space_def": {"params": {"lr": {}, "x": {}}, "fixed": {}}}
    studies = {"quickstart/random/0": later, "quickstart/auto/0": first}
    assert ls.pinned_space(studies, "quickstart") == first["space_def"]
    assert ls.pinned_space(studies, "deepseek_v3") is None
    table, base = ls.space_table("quickstart", first["space_def"])
    assert (table, base) == (first["space_def"], None)
