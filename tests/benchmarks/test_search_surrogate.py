"""The search-efficiency surrogate interpolates recorded runs, gives curves for pruning, says
what it is; the replay's ASHA rule decides like Ray Tune's."""

from __future__ import annotations

import itertools
import json
import math
import random
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.search.replay import Asha, best_loss_curve, hypervolume_curve, replay  # noqa: E402
from benchmarks.search.surrogate import GRID, LABEL, Surrogate  # noqa: E402

LRS, WARMUPS, SCHEDS, GAMMAS = (1e-3, 1e-2), (0.0, 0.2), ("constant", "linear", "step"), (
    1e-4, 1e-2)
TOKENS = [7500, 15000, 22500, 30000]


def _loss(lr: float, w: float, g: float, t: int) -> float:
    # Linear in log lr, warmup and log gamma, so multilinear interpolation must be exact.
    return 4.0 + 0.1 * math.log10(lr) + w + 0.01 * math.log10(g) + 30_000 / (t + 10_000)


def _grid(tmp_path: Path, *, diverge_lr: float | None = None) -> Path:
    runs = []
    for lr, w, s, g in itertools.product(LRS, WARMUPS, SCHEDS, GAMMAS):
        curve = [[t, _loss(lr, w, g, t)] for t in TOKENS]
        diverged = lr == diverge_lr
        if diverged:
            curve = curve[:1]
        runs.append({"preset": "debug", "precision": "bf16", "seed": 0,
                     "params": {"lr": lr, "warmup_fraction": w, "batch_schedule": s,
                                "bias_update_speed": g},
                     "curve": curve, "val_loss": "inf" if diverged else curve[-1][1],
                     "tokens_per_s": {"constant": 8000.0, "linear": 6000.0, "step": 4000.0}[s],
                     "peak_memory_bytes": 1e8, "diverged": diverged})
    fp8 = {"preset": "debug", "precision": "fp8", "seed": 0,
           "params": {"lr": 1e-3, "warmup_fraction": 0.0, "batch_schedule": "constant",
                      "bias_update_speed": 1e-4}}
    fp8.update(curve=[[t, _loss(1e-3, 0, 1e-4, t) + 0.05] for t in TOKENS],
               val_loss=_loss(1e-3, 0, 1e-4, TOKENS[-1]) + 0.05, tokens_per_s=4000.0,
               peak_memory_bytes=1e8, diverged=False)
    runs.append(fp8)
    path = tmp_path / "grid.json"
    path.write_text(json.dumps({"meta": {"token_budget": TOKENS[-1]}, "runs": runs}))
    return path


def test_recorded_points_come_back_exactly_and_between_them_it_interpolates(tmp_path):
    s = Surrogate.load(_grid(tmp_path), throughput=None)
    p = {"lr": 1e-2, "warmup_fraction": 0.2, "batch_schedule": "linear",
         "bias_update_speed": 1e-4}
    run = s.evaluate(p)
    assert [t for t, _ in run.curve] == TOKENS
    assert [v for _, v in run.curve] == pytest.approx([_loss(1e-2, 0.2, 1e-4, t) for t in TOKENS])
    mid = {"lr": 10 ** -2.5, "warmup_fraction": 0.05, "batch_schedule": "step",
           "bias_update_speed": 1e-3}
    got = s.evaluate(mid)
    assert got.val_loss == pytest.approx(_loss(10 ** -2.5, 0.05, 1e-3, TOKENS[-1]))
    assert got.tokens_per_s == pytest.approx(4000.0)


def test_every_evaluation_point_is_returned_for_pruning_and_the_result_says_surrogate(tmp_path):
    run = Surrogate.load(_grid(tmp_path), throughput=None).evaluate(
        {"lr": 3e-3, "warmup_fraction": 0.1, "batch_schedule": "constant",
         "bias_update_speed": 1e-3})
    assert [t for t, _ in run.curve] == TOKENS
    losses = [v for _, v in run.curve]
    assert losses == sorted(losses, reverse=True)  # a learning curve, not one number
    assert run.label == LABEL and "surrogate" in LABEL and "recorded real runs" in LABEL


def test_fp8_adds_the_measured_offset_and_speed_ratio(tmp_path):
    s = Surrogate.load(_grid(tmp_path), throughput=None)
    p = {"lr": 1e-3, "warmup_fraction": 0.0, "batch_schedule": "constant",
         "bias_update_speed": 1e-4}
    bf16, fp8 = s.evaluate(p), s.evaluate({**p, "precision": "fp8"})
    assert fp8.val_loss - bf16.val_loss == pytest.approx(0.05)
    assert fp8.tokens_per_s / bf16.tokens_per_s == pytest.approx(0.5)


def test_a_throughput_table_sets_speed_per_schedule_and_precision(tmp_path):
    runs = [{"params": {"batch_schedule": s}, "precision": p, "tokens_per_s": tps,
             "peak_memory_bytes": 5e7}
            for s, p, tps in [("step", "bf16", 9000.0), ("step", "bf16", 9400.0),
                              ("step", "bf16", 1000.0), ("step", "fp8", 4000.0)]]
    tp = tmp_path / "throughput.json"
    tp.write_text(json.dumps({"runs": runs}))
    s = Surrogate.load(_grid(tmp_path), throughput=tp)
    p = {"lr": 3e-3, "warmup_fraction": 0.1, "batch_schedule": "step", "bias_update_speed": 1e-3}
    assert s.evaluate(p).tokens_per_s == 9000.0  # the median: one slow outlier does not count
    assert s.evaluate({**p, "precision": "fp8"}).tokens_per_s == 4000.0
    assert s.evaluate(p).val_loss == Surrogate.load(_grid(tmp_path), throughput=None).evaluate(
        p).val_loss
    assert s.speed_source == "throughput.json"


def test_a_diverged_corner_makes_the_cell_diverge_and_bad_input_is_named(tmp_path):
    s = Surrogate.load(_grid(tmp_path, diverge_lr=1e-2), throughput=None)
    run = s.evaluate({"lr": 5e-3, "warmup_fraction": 0.1, "batch_schedule": "step",
                      "bias_update_speed": 1e-3})
    assert run.diverged and math.isinf(run.val_loss)
    with pytest.raises(ValueError, match="batch_schedule"):
        s.evaluate({"lr": 1e-3, "warmup_fraction": 0.0, "batch_schedule": "cubic",
                    "bias_update_speed": 1e-3})


def test_asha_stops_the_same_trials_as_ray_tunes_rule():
    from ray.tune.schedulers.async_hyperband import _Bracket

    class T:
        def __init__(self, i):
            self.trial_id = str(i)

    rnd = random.Random(0)
    ours = Asha(max_t=60_000, grace=15_000, reduction_factor=3)
    ray_b = _Bracket(15_000, 60_000, 3, 0, stop_last_trials=False)
    stopped_ours, stopped_ray = set(), set()
    for i in range(30):
        for tokens in (7_500, 16_384, 30_000, 46_000):
            loss = rnd.uniform(3, 5)
            a = ours.decide(i, tokens, loss)
            b = ray_b.on_result(T(i), tokens, -loss) == "STOP"
            assert a == b
            if a:
                stopped_ours.add(i)
                stopped_ray.add(i)
                break
    assert stopped_ours and stopped_ours == stopped_ray


def test_a_replayed_study_prunes_and_reports_compute(tmp_path):
    from benchmarks.search.compare import make_spec

    s = Surrogate.load(_grid(tmp_path), throughput=None)
    spec = make_spec(sampler="random", scheduler="asha", seed=0, n_trials=12,
                     budget=TOKENS[-1], grace=7_500)
    rep = replay(spec, s, method="random_asha")
    assert len(rep.trials) == 12
    assert any(t.state == "pruned" for t in rep.trials)
    spent = [t.tokens_spent for t in rep.trials]
    assert spent == sorted(spent) and spent[-1] < 12 * TOKENS[-1]
    hv = hypervolume_curve(rep)
    assert [h for _, _, h in hv] == sorted(h for _, _, h in hv) and hv[-1][2] > 0
    assert best_loss_curve(rep)[-1][2] == min(t.values[0] for t in rep.trials if t.values)


@pytest.mark.skipif(not GRID.exists(), reason="grid.json not recorded")
def test_the_shipped_grid_reproduces_its_own_recorded_runs():
    data = json.loads(GRID.read_text())
    s = Surrogate(data)  # speed interpolated from the grid itself
    runs = [r for r in data["runs"] if r["precision"] == "bf16" and r["seed"] == 0
            and not r["diverged"]]
    for r in runs[:: max(1, len(runs) // 10)]:
        got = s.evaluate(r["params"])
        assert np.allclose([v for _, v in got.curve], [v for _, v in r["curve"]])
        assert got.tokens_per_s == pytest.approx(r["tokens_per_s"])


def test_holdout_error_is_zero_when_the_truth_is_multilinear(tmp_path):
    from benchmarks.search.surrogate import holdout_error

    # Three lr levels, loss linear in log lr: leaving the middle one out loses nothing.
    data = json.loads(_grid(tmp_path).read_text())
    extra = []
    for r in data["runs"]:
        if r["precision"] == "bf16" and r["params"]["lr"] == 1e-2:
            p = {**r["params"], "lr": 1e-1}
            curve = [[t, _loss(1e-1, p["warmup_fraction"], p["bias_update_speed"], t)]
                     for t in TOKENS]
            extra.append({**r, "params": p, "curve": curve, "val_loss": curve[-1][1]})
    data["runs"] += extra
    h = holdout_error(data)
    assert h["n"] == 12 and h["max"] == pytest.approx(0.0, abs=1e-9)


def test_replays_do_not_depend_on_jobs_and_the_summary_measures_ashas_saving(tmp_path):
    from benchmarks.search.compare import METHODS, VARIANTS, make_spec, run_methods, summarise

    s = Surrogate.load(_grid(tmp_path), throughput=None)
    methods = [m for m in METHODS + VARIANTS if m[0] in ("random", "tpe", "tpe_asha_g3750_rf4")]
    kw = {"token_budget": 12 * TOKENS[-1], "budget": TOKENS[-1], "n_trials": 12}

    def strip(res):
        return {k: [{f: v for f, v in r.items() if f != "cpu_s"} for r in runs]
                for k, runs in res.items()}

    one = run_methods(s, methods, range(2), jobs=1, **kw)
    assert strip(one) == strip(run_methods(s, methods, range(2), jobs=2, **kw))
    summary = summarise(one)["methods"]
    asha, tpe = summary["tpe_asha_g3750_rf4"], summary["tpe"]
    assert (asha["scheduler"], asha["grace_tokens"], asha["reduction_factor"]) == ("asha", 3750,
                                                                                     4.0)
    assert sum(r["pruned"] for r in one["tpe_asha_g3750_rf4"]) > 0
    target = float(np.median([r["best"][-1][2] for r in one["tpe"]]))
    assert asha["same_best"]["reference"] == tpe["same_best"]["reference"] == "tpe"
    assert asha["same_best"]["target"] == target
    assert "same_best" not in summary["random"]  # no sampler-without-pruning to compare with
    assert make_spec(sampler="gp", scheduler="none", seed=0, startup=3).study.startup_trials == 3
