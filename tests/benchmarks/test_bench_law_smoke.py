"""The law benchmark (`benchmarks/bench_law.py MODE`, one module per mode in benchmarks/law/):
its parts that need no trainings (the specs it writes from the shipped `search_spaces/law.toml`,
the pooled simulation at toy size, the RESULTS sections rendered from the committed JSON), and
the grid mode end to end on the known-law fake."""

from __future__ import annotations

import difflib
import json
import math
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import bench_law  # noqa: E402
from benchmarks.law import MODES, beyond, grid, held_batch, pooled  # noqa: E402
from benchmarks.law import batch as bench  # noqa: E402
from benchmarks.law.common import spec_text  # noqa: E402


def test_every_mode_is_a_subcommand_of_the_one_entry_point(capsys):
    assert set(MODES) == {"one-batch", "batch", "pooled", "table", "backtest", "grid", "beyond",
                          "held-batch", "anchored", "other-lab"}
    for mode in MODES:
        with pytest.raises(SystemExit) as e:
            bench_law.main([mode, "--help"])
        assert e.value.code == 0
        assert f"python benchmarks/bench_law.py {mode}" in capsys.readouterr().out
    old = ["bench_law_batch.py", "bench_law_pooled.py", "bench_law_table.py", "backtest_law.py"]
    assert not [name for name in old if (ROOT / "benchmarks" / name).exists()]


# --- batch: law.toml's design with the batch fixed or searched -------------------------------

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


# --- pooled: pooled against per-budget fits ---------------------------------------------------

def test_the_simulation_and_the_level_run_at_toy_size():
    rows = pooled.simulate(n=2)
    assert {(r["sd"], r["fit"]) for r in rows} == {(sd, fit) for sd in (0.03, 0.07)
                                                   for fit in ("pooled", "line")}
    assert all(0 <= r["coverage"] <= 1 and r["mean_error_x"] >= 1 for r in rows)
    level = pooled.lack_of_fit_level(n=3)
    assert len(level) == 6 and all(0 <= r["rejected"] <= 1 for r in level)


def test_the_committed_pooled_results_render_every_table():
    data = json.loads(pooled.OUT.read_text())
    text = "\n".join(pooled.results_lines(data))
    assert "| noise sd | fit | studies |" in text and "Lack-of-fit test" in text
    assert "**Real trainings**" in text and "**Bytes against BPE**" in text
    # every real seed has both fits, and the pooled rows say what they left out
    for seed in (0, 1, 2):
        rows = [r for r in data["real"] if r["seed"] == seed and r["budgets"] == "all 4 budgets"]
        assert {r["fit"] for r in rows} == {"pooled", "line"}
        assert next(r for r in rows if r["fit"] == "pooled")["left_out"] is not None


# --- grid: law.toml as shipped, over seeds -----------------------------------------------------

def _changed(text: str) -> list[str]:
    """The lines ``text`` changes from the shipped law.toml (removed and added)."""
    shipped = (ROOT / "search_spaces" / "law.toml").read_text().splitlines()
    return [d for d in difflib.unified_diff(shipped, text.splitlines(), lineterm="", n=0)
            if d[:1] in "+-" and d[:3] not in ("+++", "---")]


def test_the_grid_spec_is_law_toml_with_only_its_name_and_seed_set():
    assert _changed(grid.spec_text(3)) == ['-name = "law"', '+name = "law-s3"', '-seed = 0',
                                           '+seed = 3']
    assert _changed(grid.spec_text(0)) == ['-name = "law"', '+name = "law-s0"']
    assert grid.spec_text(0).endswith("\n")


def test_the_grid_section_says_what_a_seed_has_not_reached():
    """A seed whose study has not placed its law or run its held-out budget and batch prints
    "not reached yet", never fails."""
    data = {"config": {"tokens": [1, 2], "held_out": 3, "batches": [1, 4], "held_out_batch": 8,
                       "trials": 6, "trainer": "fake"},
            "seeds": {"0": grid.NOT_STARTED,
                      "1": {"lr_batch_law": None, "lr_batch_note": "cells: too few",
                            "held_out_check": None, "held_out_batch_check": None,
                            "wall_s": 90.0, "wall_complete": False}}}
    text = "\n".join(grid.results_lines(data))
    assert ("not fitted yet (study not started)" in text
            and "not fitted yet (cells: too few)" in text)
    assert text.count("| not reached yet |") == 4
    assert "- held-out budget: not reached yet (0 of 2 seeds)." in text
    assert "- held-out batch: not reached yet (0 of 2 seeds)." in text
    assert "1.5 min (partial: resumed" in text and "unknown (not run by this benchmark)" in text


def test_the_grid_section_says_how_far_past_the_grid_lr_fell_and_what_the_prediction_cost():
    """Per seed, each judged held-out cell's ratio and the D-exponent beyond the law's its fall
    needs (a 2x over-prediction over log10(5) decades needs -0.43 more), beside the fitted
    cells' own bend; a flat-bowl cell is left out; and the predicted recipe's trial against
    the best searched, counted against 2 noise sd."""
    check = {"lr_predicted": 2e-3, "lr_band": [1e-3, 4e-3], "lr_measured": 1e-3,
             "lr_ratio": 2.0, "lr_inside": True, "tokens": 2_621_440,
             "loss_gap_best": 0.03, "loss_gap_best_sd": 1.5,
             "cells": [{"batch": 128.0, "lr_ratio": 2.0, "censored": False},
                       {"batch": 2048.0, "lr_ratio": 0.1, "censored": True, "at_edge": True}]}
    seed = {"lr_batch_law": None, "lr_batch_note": "", "held_out_check": check,
            "held_out_batch_check": check | {"loss_gap_best_sd": 6.5},
            "fitted_bend": {"uu": 0.1, "se": 0.15, "shrink": 0.48},
            "budgets": [{"tokens": 524_288, "held_out": False, "held_out_batch": False},
                        {"tokens": 2_621_440, "held_out": True, "held_out_batch": False}]}
    data = {"config": {"tokens": [1, 2], "held_out": 3, "batches": [1, 4], "held_out_batch": 8,
                       "trials": 6, "trainer": "fake"}, "seeds": {"0": seed}}
    text = "\n".join(grid.results_lines(data))
    assert "over the 0.70 decades from the largest fitted budget" in text
    assert "seed 0: 128: 2.00x, -0.43; the fitted cells' bend +0.100 ± 0.150" in text
    assert "2048: 0.10x" not in text  # the flat bowl is not judged
    assert "the predicted recipe's trial +0.030 (+1.5 sd) from the best searched" in text
    budget, batch = (line for line in text.splitlines() if line.startswith("- held-out"))
    assert "within 2 noise sd of the best searched in 1/1" in budget
    assert "within 2 noise sd of the best searched in 0/1" in batch


def test_the_grid_mode_runs_the_shipped_design_end_to_end_on_the_fake(tmp_path):
    """``grid --smoke``: law.toml with its budgets and trials made small, trained by the
    known-law fake over its grid: the JSON and the section carry the held-out budget's and the
    held-out batch's predicted / measured lr* with their bands, and the cross-seed targets."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_law.py"), "grid",
                           "--smoke", "--seeds", "0", "--root", str(tmp_path)],
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "law-s0.toml").read_text() == grid.spec_text(0, grid.SMOKE)
    data = json.loads((tmp_path / "law_grid.json").read_text())
    d = data["seeds"]["0"]
    assert d["lr_batch_law"] is not None, d["lr_batch_note"]
    assert d["wall_complete"] and d["wall_s"] > 0
    for key in ("held_out_check", "held_out_batch_check"):
        h = d[key]
        assert h["lr_band"][0] < h["lr_predicted"] < h["lr_band"][1]
        assert h["lr_measured"] > 0 and h["lr_ratio"] == pytest.approx(
            h["lr_predicted"] / h["lr_measured"])
    row = next(line for line in proc.stdout.splitlines() if line.startswith("| 0 |"))
    assert "log10 lr* = 1: " in row and "not reached yet" not in row
    held, _, batch = row.split(" | ")[2:5]
    assert " / " in held and " = " in held and " / " in batch and " = " in batch
    assert f"= {d['held_out_check']['lr_ratio']:.2f}" in held
    assert f"= {d['held_out_batch_check']['lr_ratio']:.2f}" in batch
    assert d["fitted_bend"]["se"] > 0 and 0 <= d["fitted_bend"]["shrink"] <= 1
    for key in ("held_out_check", "held_out_batch_check"):  # the predicted recipe's own trial
        assert d[key]["loss_gap_best"] == pytest.approx(
            d[key]["loss_predicted_recipe"] - d[key]["loss_best_searched"])
    assert "- held-out budget: lr* predicted within 1.5x of the measured in " in proc.stdout
    assert "- held-out batch: lr* predicted within 1.5x of the measured in " in proc.stdout
    assert "Measured: " in proc.stdout and "Modeled: " in proc.stdout


# --- beyond: the grid one budget further ---------------------------------------------------------

def test_beyond_makes_the_held_out_budget_fitted_and_holds_out_5x_past_it(tmp_path):
    """A grid study's stored spec gains its held-out budget as a fitted one and a new held-out
    budget 5x above it at the largest batch alone, with no held-out batch; the result is a
    spec the product reads, and a second call changes nothing."""
    import optuna

    from tuner.study.specs.spec import parse_spec
    from tuner.study.store import records
    from tuner.study.store import storage as st

    spec = parse_spec(tomllib.loads(grid.spec_text(0)))
    path = tmp_path / "study.db"
    st.create_study(spec, optuna.storages.RDBStorage(f"sqlite:///{path}"))
    law = beyond.extend(path, "law-s0")
    assert law["tokens"] == [*spec.law.tokens, spec.law.held_out]
    assert law["held_out"] == 5 * spec.law.held_out and "held_out_batch" not in law
    assert law["held_out_at_batch"] == spec.law.batches[-1] == beyond.AT_BATCH
    study = optuna.load_study(study_name="law-s0", storage=f"sqlite:///{path}")
    stored = study.user_attrs[records.SPEC]
    extended = parse_spec(stored)
    assert extended.law.batches_at(len(extended.law.tokens)) == (beyond.AT_BATCH,)
    assert extended.study.noise_top == 1 and extended.study.name == "law-s0"
    assert beyond.extend(path, "law-s0") == law
    assert study.user_attrs[records.SPEC] == stored


def test_beyond_results_judge_each_seed_and_say_what_is_not_reached():
    h = {"lr_predicted": 3.2e-3, "lr_band": [5e-4, 9e-3], "lr_measured": 2.0e-3,
         "lr_interval": [1.5e-3, 2.6e-3], "lr_ratio": 1.6, "lr_inside": True,
         "loss_gap_best": 0.012, "loss_gap_best_sd": 0.4}
    lines = beyond.results_lines({"seeds": {"2": {"held_out_check": h, "trials": [
        [1e-3, 1.39], [3.2e-3, 1.34]]}, "1": None}})
    row = next(line for line in lines if line.startswith("| 2 |"))
    assert "0.0032 [0.0005, 0.009]" in row and "1.60 (inside the band)" in row
    assert "+0.012 (0.4 noise sd) from the best searched" in row
    assert ("- Seed 2's trials at the new held-out budget (lr: val_loss): 0.001: 1.390, "
            "0.0032: 1.340.") in lines
    assert "| 1 | not reached yet |" in "\n".join(lines)
    assert "within 1.5x of the measured in 0/1 seeds" in "\n".join(lines)


def test_beyond_reads_the_grid_law_beside_the_bend_where_it_was_written_down():
    """The readings written down before the runs are set against the measured lr*: the bent
    law's, the mixture's, and (seed 3 on) the grid's own law's; a seed without it says none."""
    alt = {"bent": 0.0015, "mixture": 0.0017, "uu": -0.114, "uu_se": 0.054}
    said = beyond._readings(alt | {"grid_law": 0.0045}, 0.003)
    assert said.startswith("0.0015 (0.50) / 0.0017 (0.57) (bend -0.114 ± 0.054)")
    assert said.endswith("before the held-out one joined) 0.0045 (1.50)")
    assert "grid's own law" not in beyond._readings(alt, 0.003)


# --- held-batch: the grid's held-out batch at its held-out budget --------------------------------

def test_held_batch_predicts_with_the_grid_law_at_the_held_out_budget_and_batch(tmp_path):
    """The prediction is each seed's stored lr*(D, B) at 2,621,440 tokens and law.toml's
    held-out batch, inside the law's D range (a fitted budget); the spec is law.toml's with the
    held-out batch moved there, and its budget is the product's (320 steps of 8,192 tokens)."""
    from tuner.modeling.laws.lr_batch_law import LrBatchLaw
    from tuner.study.workflows.law import budget_spec

    stored = json.loads(held_batch.GRID.read_text())["seeds"]["1"]["lr_batch_law"]
    law = LrBatchLaw.from_dict(stored)
    p = held_batch.prediction(1)
    assert p["batch"] == 64 * 128 and p["tokens"] == held_batch.TOKENS
    assert p["lr"] == pytest.approx(law.at(2_621_440, 8192))
    assert p["lr_band"][0] < p["lr"] < p["lr_band"][1]
    assert p["decades_past"] == {"tokens": 0.0, "batch": pytest.approx(math.log10(4))}
    spec = held_batch.seed_spec(1, tmp_path)
    hob = budget_spec(spec, spec.law.held_out_batch_index, predicted=p, point={"lr": p["lr"]})
    assert hob.name == "law-s1.t2621440.b64" and hob.budget.tokens_per_trial == 2_621_440
    assert hob.study.seed == 1 and hob.study.n_trials == held_batch.TRIALS + 1
    assert hob.study.noise_top == 1 and hob.study.noise_repeats == 2


def test_held_batch_results_judge_each_seed_beside_the_grids_check():

    check = {"lr_predicted": 0.0087, "lr_band": [0.0034, 0.02], "lr_measured": 0.0070,
             "lr_interval": [0.005, 0.0095], "lr_ratio": 0.0087 / 0.0070, "lr_inside": True,
             "at_edge": [], "lr_surface": 0.0075, "loss_gap_best": 0.01,
             "loss_gap_best_sd": 0.5}
    pre = {"0": {"lr": 0.0087, "lr_band": [0.0034, 0.02]},
           "1": {"lr": 0.0118, "lr_band": [0.0034, 0.027]}}
    lines = held_batch.results_lines({"preregistered": pre, "seeds": {
        "0": {"check": check, "trials": [[0.001, 2.1], [0.0087, 2.0]]}}, "notes": ["n."]})
    text = "\n".join(lines)
    row = next(line for line in lines if line.startswith("| 0 |"))
    assert "0.0087 [0.0034, 0.02] | 0.007 [0.005, 0.0095] | 1.24 (inside the band)" in row
    assert "0.0075 (1.16)" in row and "+0.010 (0.5 noise sd) from the best searched" in row
    assert row.endswith("| 0.39 |")  # the grid's own check at 64 steps, from law_grid.json
    assert "| 1 | 0.0118 [0.0034, 0.027] | not reached yet |" in text
    assert "lr* within 1.5x: 1 of 1 seeds" in text and "within 2 noise sd" in text
    assert "- Seed 0's trials (lr: val_loss): 0.001: 2.100, 0.0087: 2.000." in lines
    assert lines[-1] == "- n." and "Measured: " in text and "Modeled: " in text


# --- other-lab: another lab's table law read at the published recipes ----------------------------

def test_other_lab_reads_a_table_law_at_every_recipe_and_its_band_reaches_the_prior(tmp_path):
    """A synthetic sweep in Step Law's columns (bs in sequences of 2,048 tokens), fitted as the
    mode fits it, read at every AdamW recipe: where the law is the narrower and disagrees, the
    answer's band holds the law's band and reaches the prior's value, so it holds every
    published LR the law's own band held."""
    import numpy as np
    import pandas as pd

    from benchmarks.law import other_lab
    from tuner.modeling.anchor.recipe_table import load_recipes

    rng = np.random.default_rng(0)
    rows = []
    for n in (2e8, 4e8, 8e8):
        for d in (4e9, 1e10, 2.5e10):
            for bs in (64, 256, 1024):
                best = -2.0 - 0.25 * math.log10(d / 1e10) + 0.3 * math.log10(bs / 256) \
                    - 0.2 * math.log10(n / 4e8)
                for x in best + 0.15 * np.arange(-4, 5):
                    rows.append({"N": n, "D": d, "bs": bs, "lr": 10**x,
                                 "loss": 2.5 + 0.5 * (x - best) ** 2 + rng.normal(0, 0.002),
                                 "smooth loss": 2.5})
    csv = tmp_path / "sweep.csv"
    pd.DataFrame(rows).to_csv(csv, index=False)
    law = other_lab._fit(str(csv))
    got = other_lab.rows_for(law)
    assert [r["recipe"] for r in got] == [r.name for r in load_recipes() if r.in_prior]
    reached = [r["answer"] for r in got if r["answer"]["disagree"] and r["answer"]["weight"] == 1]
    assert reached, "the synthetic law disagrees with practice somewhere: the case under test"
    assert all(a["width"] > a["own_width"] * 1.01 for a in reached)  # out to the prior's value
    for a in (r["answer"] for r in got):
        assert a["in"] or not a["in_own"]  # reaching out never loses a published LR
    lines = other_lab._lines("synthetic", law, got)
    assert any("the rule before" in line for line in lines)
