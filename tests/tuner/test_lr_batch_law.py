"""The lr law in tokens and batch: its fit, its band's coverage on synthetic truths, and
``moetune law fit`` on a table of runs."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.tuner import lr_batch_battery as battery
from tuner.app.cli import main
from tuner.modeling.laws.lr_batch_law import (
    Cell,
    LawFitError,
    LrBatchLaw,
    censored_bound,
    fit_batch_optimum,
    fit_lr_batch_law,
    skew_shift,
)

COVERAGE_FLOOR = 0.85  # per truth family and point group, 10 draws, nominal 95%
DRAWS = 10


def _exact_cells(noise: float = 0.0, seed: int = 0, se: float = 0.05) -> list[Cell]:
    rng = np.random.default_rng(seed)
    return [Cell(tokens=d, batch=b, se=se,
                 lr=10 ** (battery.true_log_lr("loglinear", d, b) + rng.normal(0, noise)))
            for d in battery.TOKENS for b in battery.BATCHES]


def test_the_law_recovers_a_loglinear_truth_with_its_d_by_b_term() -> None:
    law = fit_lr_batch_law(_exact_cells(se=0.01))  # cells precise enough to resolve the term
    assert "uv" in law.terms and not law.left_out
    for d, b in [(battery.HELD_D, 2560.0), (battery.FAR_D, 256.0), (6.3e5, battery.HELD_B)]:
        assert math.log10(law.at(d, b)) == pytest.approx(
            battery.true_log_lr("loglinear", d, b), abs=1e-6)
    # the truth's D-exponent is −0.1 + 0.1·log10(B/800): it changes with the batch
    assert law.tokens_exponent(8000.0) == pytest.approx(0.0, abs=1e-6)
    assert law.tokens_exponent(80.0) == pytest.approx(-0.2, abs=1e-6)


def test_decades_past_is_stated_in_tokens_and_in_batch_separately() -> None:
    law = fit_lr_batch_law(_exact_cells())
    assert law.decades_past(6.3e5 * 100, 810.0) == pytest.approx({"tokens": 2.0, "batch": 0.0})
    assert law.decades_past(2e5, 256.0 / 10) == pytest.approx({"tokens": 0.0, "batch": 1.0})


def test_the_band_widens_with_the_distance_past_the_fitted_cells() -> None:
    law = fit_lr_batch_law(_exact_cells(noise=0.05))
    widths = [math.log10(hi / lo) for lo, hi in
              (law.band(d, 810.0) for d in (2e5, battery.HELD_D, battery.FAR_D))]
    assert widths[0] < widths[1] < widths[2]


def test_law_json_round_trips() -> None:
    law = fit_lr_batch_law(_exact_cells(noise=0.05))
    back = LrBatchLaw.from_dict(json.loads(json.dumps(law.to_dict())))
    assert back.at(battery.FAR_D, 4096.0) == pytest.approx(law.at(battery.FAR_D, 4096.0))
    assert back.band(battery.FAR_D, 4096.0) == pytest.approx(law.band(battery.FAR_D, 4096.0))


def test_several_model_sizes_give_the_law_an_n_term_that_needs_params() -> None:
    cells = [Cell(tokens=c.tokens, batch=c.batch, se=c.se, params=n,
                  lr=c.lr * (n / 1e8) ** -0.5) for n in (1e8, 4e8) for c in _exact_cells()]
    law = fit_lr_batch_law(cells)
    assert law.at(2e5, 810.0, 1.6e9) == pytest.approx(law.at(2e5, 810.0, 1e8) / 4, rel=1e-6)
    with pytest.raises(ValueError, match="params"):
        law.at(2e5, 810.0)


@pytest.mark.parametrize("cells, words", [
    (_exact_cells()[:5], "at least 6 cells"),
    ([c for c in _exact_cells() if c.batch == 256.0] * 2, "2 distinct batch"),
])
def test_too_little_data_is_refused_naming_what_is_missing(cells, words) -> None:
    with pytest.raises(LawFitError, match=words):
        fit_lr_batch_law(cells)


def test_a_bowl_steeper_above_its_bottom_is_seen_as_skewed() -> None:
    x = np.linspace(-0.5, 0.5, 9)
    z = 3.0 + np.where(x > 0, 3.0, 1.0) * 0.6 * x ** 2
    assert skew_shift(10 ** x, z) > 0.03  # the quadratic's vertex sits below the true bottom
    assert abs(skew_shift(10 ** x, 3.0 + 0.6 * x ** 2)) < 0.01


def test_the_batch_optimum_is_placed_only_inside_the_grid() -> None:
    def row(tokens: float, best: float) -> list[Cell]:
        return [Cell(tokens=tokens, batch=b, lr=1e-3, se=0.05,
                     loss=3 + (math.log10(b) - math.log10(best)) ** 2) for b in (256, 810, 2560)]

    bo = fit_batch_optimum(row(1e5, 800.0) + row(1e6, 1200.0) + row(1e7, 100.0))
    placed = {r["tokens"]: r["batch"] for r in bo.rows}
    assert placed[1e5] == pytest.approx(800.0, rel=0.01)
    assert placed[1e7] is None
    assert "smallest batch" in bo.rows[2]["why"]
    assert bo.exponent == pytest.approx(math.log10(1200 / 800), rel=0.01)


def test_a_cell_whose_best_run_is_on_the_ranges_edge_bounds_lr_on_that_side() -> None:
    lrs = [1e-4, 2e-4, 4e-4, 8e-4, 1.6e-3, 3.2e-3]
    falling = [3.0, 3.1, 3.2, 3.3, 3.4, float("nan")]  # best at the smallest, a diverged run
    assert censored_bound(lrs, falling) == "upper"
    assert censored_bound(lrs, [3.5, 3.4, 3.3, 3.2, 3.1, 3.0]) == "lower"
    assert censored_bound(lrs, [3.2, 3.1, 3.0, 3.1, 3.2, 3.3]) == ""


def _cornered(bound: str) -> list[Cell]:
    """The loglinear truth's cells, but at the smallest batch the two largest budgets'
    optima fell below the searched range (censored at lr 10^-2.95, far under the law)."""
    cells = _exact_cells(noise=0.03, seed=3, se=0.03)
    corner = {(2e5, 256.0), (6.3e5, 256.0)}
    return [dataclasses.replace(c, lr=10 ** -2.95, censored=True, bound=bound)
            if (c.tokens, c.batch) in corner else c for c in cells]


def test_censored_cells_enter_the_fit_as_bounds_and_their_misfit_widens_the_band() -> None:
    with_bounds, without = fit_lr_batch_law(_cornered("upper")), fit_lr_batch_law(_cornered(""))
    assert (with_bounds.n_cells, without.n_cells) == (12, 10)
    # left out, the corner's drop is invisible: the law and its scatter are the other cells';
    # as bounds, the law is pulled toward them and the scatter they add widens the band there
    assert with_bounds.at(6.3e5, 256.0) < without.at(6.3e5, 256.0)
    assert with_bounds.tau > without.tau
    lo, _ = with_bounds.band(6.3e5, 256.0)
    assert lo < without.band(6.3e5, 256.0)[0]


@pytest.mark.parametrize("family", battery.FAMILIES)
def test_the_band_covers_the_truth_at_held_out_cells_and_two_decades_past(family) -> None:
    cov, width = battery.coverage(family, 0.05, DRAWS, seed=7)
    for group, share in cov.items():
        # two decades past the budgets included, on the bent truth too: the band is the
        # mixture with the bent law, which a linear law's band alone covered in about 80%
        assert share >= COVERAGE_FLOOR, (family, group, share)
    # and is not vacuous: the held-out budget's band is within 4x either side
    assert width["held-out D (5x)"] < 4.0


def _write_runs(path, *, rows=None) -> None:
    """A Step-Law-shaped table: batch in sequences of 2,048 (``bs``), an architecture column
    constant per cell, a run name, a second loss."""
    rng = np.random.default_rng(0)
    lines = ["N,D,bs,lr,loss,smooth loss,h,exp_name"]
    k = 0
    for d in battery.TOKENS:
        for bs in (1, 4, 16):
            m = battery.true_log_lr("loglinear", d, bs * 2048.0)
            for x in m + 0.15 * np.arange(-4, 5):
                z = 3 + 0.6 * (x - m) ** 2 + rng.normal(0, 0.01)
                lines.append(f"1e8,{d},{bs},{10 ** x:.6g},{z:.5f},{z + 0.01:.5f},64,run{k}")
                k += 1
    path.write_text("\n".join(rows(lines) if rows else lines) + "\n")


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_law_fit_reads_a_step_law_shaped_table_and_writes_law_files(tmp_path, suffix) -> None:
    runs = tmp_path / "runs.csv"
    _write_runs(runs)
    if suffix == ".parquet":
        import pandas as pd

        pd.read_csv(runs).to_parquet(runs.with_suffix(".parquet"))
        runs = runs.with_suffix(".parquet")
    out = tmp_path / "law"
    rc = main(["law", "fit", str(runs), "--column", "B=bs", "--batch-unit", "2048",
               "--vary", "smooth loss", "--out", str(out)])
    assert rc == 0
    data = json.loads((out / "law.json").read_text())
    law = LrBatchLaw.from_dict(data["lr_batch_law"])
    assert law.batch_range == (2048.0, 16 * 2048.0)
    truth = battery.true_log_lr("loglinear", 6.3e5, 8192.0)
    assert abs(math.log10(law.at(6.3e5, 8192.0)) - truth) < 0.05
    assert "D-exponent" in (out / "law.md").read_text()
    assert (out / "law.png").stat().st_size > 0


def test_a_sweep_too_short_for_its_cells_names_them_and_why(tmp_path, capsys) -> None:
    """5 lrs 0.15 decades apart per cell: 3 lie within the window of the best, fewer than a
    cell's surface needs, so every cell is skipped; the error says which and why, not only
    that no tokens were left."""
    runs = tmp_path / "runs.csv"
    _write_runs(runs, rows=lambda ls: ls[:1] + [ln for i, ln in enumerate(ls[1:]) if i % 9 in
                                                  (2, 3, 4, 5, 6)])
    out = tmp_path / "law"
    assert main(["law", "fit", str(runs), "--column", "B=bs", "--batch-unit", "2048",
                 "--vary", "smooth loss", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    n_cells = len(battery.TOKENS) * 3
    assert f"{n_cells} of {n_cells} cells have no lr optimum: N 1e+08, D " in err
    assert "(5 runs): a response surface needs at least 6 feasible trials, but got" in err
    assert f"and {n_cells - 4} more" in err and not out.exists()
    assert "Traceback" not in err


def test_law_fit_help_states_what_a_cell_needs(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["law", "fit", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "each (N, D, B) cell at least 6 runs with a finite loss within 0.5 decades" in said
    assert "a 5-lr sweep is not enough" in said


@pytest.mark.parametrize("args, edit, words", [
    (["--column", "B=batch"], None, "column 'batch' (for B): must be in the table"),
    (["--column", "B=bs"], None, "column 'smooth loss': must be constant within each"),
    (["--column", "B=bs"],  # every column that varies is named, not one per attempt
     lambda ls: [ls[0] + ",wall"] + [f"{x},{i}" for i, x in enumerate(ls[1:])],
     "; so do 1 more: 'wall' (declare each that is a result of the run with --vary"),
    (["--column", "B=bs", "--vary", "smooth loss", "--column", "lr"], None,
     "--column: must be KEY=NAME"),
    (["--column", "X=bs"], None, "--column: keys must be among"),
    (["--column", "B=bs", "--vary", "smooth loss", "--batch-unit", "0"], None,
     "--batch-unit: must be a positive number"),
    (["--column", "B=bs", "--vary", "smooth loss"],
     lambda ls: ls[:5] + [ls[5].replace(ls[5].split(",")[3], "-1e-3", 1)] + ls[6:],
     "column 'lr' (for lr): must be a positive finite number in every row, but got -0.001 "
     "in row 6"),  # the file's value, not np.float64(-0.001)
    (["--column", "B=bs", "--vary", "smooth loss"], lambda ls: ls[:1] + ls[1:40],
     "needs at least 6 cells"),
])
def test_bad_tables_exit_2_naming_the_column_and_write_nothing(tmp_path, capsys, args, edit,
                                                               words) -> None:
    runs = tmp_path / "runs.csv"
    _write_runs(runs, rows=edit)
    out = tmp_path / "law"
    assert main(["law", "fit", str(runs), "--out", str(out), *args]) == 2
    assert words in capsys.readouterr().err
    assert not out.exists()



def test_the_export_reads_the_law_at_its_batch_through_lr_at_batch() -> None:
    from tuner.modeling.laws.interface import LrLaw
    from tuner.modeling.laws.lr_at_batch import lr_at_batch

    law = fit_lr_batch_law(_exact_cells(noise=0.05))
    assert isinstance(law, LrLaw)
    got = lr_at_batch(law, tokens=battery.FAR_D, batch=8 * battery.HELD_B, flops_per_token=1.0)
    assert got.lr == pytest.approx(law.at(battery.FAR_D, 8 * battery.HELD_B))
    assert got.band[0] < got.lr < got.band[1] and not got.refusal
    assert got.decades_tokens == pytest.approx(2.0)
    assert got.decades_batch == pytest.approx(math.log10(32))


def _budget(i: int, tokens: float, batches: tuple[float, ...], rng: np.random.Generator):
    from tuner.study.workflows.law_fit import BudgetResult

    trials = []
    for b in batches:
        m = battery.true_log_lr("loglinear", tokens, b)
        for x in m + 0.15 * np.arange(-4, 5):
            trials.append((10 ** x, b, 3 + 0.6 * (x - m) ** 2 + rng.normal(0, 0.01)))
    return BudgetResult(index=i, study=f"s{i}", tokens=int(tokens), compute=tokens, held_out=False,
                        n_trials=len(trials), optimum=None, error="", best={}, noise_sd=None,
                        predicted_trial={}, trials=tuple(trials))


def test_a_law_study_whose_budgets_searched_three_batches_fits_the_law_in_both() -> None:
    from reports.laws.law import lr_batch_lines
    from tuner.study.workflows.law_fit import lr_batch_law

    rng = np.random.default_rng(0)
    budgets = [_budget(i, d, battery.BATCHES, rng) for i, d in enumerate(battery.TOKENS)]
    law, note = lr_batch_law(budgets)
    assert law is not None and not note and law.n_cells == 12
    truth = battery.true_log_lr("loglinear", battery.HELD_D, battery.HELD_B)
    assert abs(math.log10(law.at(battery.HELD_D, battery.HELD_B)) - truth) < 0.1
    text = "\n".join(lr_batch_lines({"lr_batch_law": law.to_dict()}))
    assert "12 (budget, batch) cells" in text and "D-exponent" in text


def test_a_law_study_at_one_batch_has_no_law_in_batch_and_says_so() -> None:
    from reports.laws.law import lr_batch_lines
    from tuner.study.workflows.law_fit import lr_batch_law

    rng = np.random.default_rng(0)
    budgets = [_budget(i, d, (256.0,), rng) for i, d in enumerate(battery.TOKENS)]
    law, note = lr_batch_law(budgets)
    assert law is None and "1 batch(es)" in note
    text = "\n".join(lr_batch_lines({"lr_batch_law": None, "lr_batch_note": note}))
    assert "No law in tokens and batch" in text and "refuses" in text


def test_a_study_law_that_fitted_the_batch_exports_its_lr_at_any_batch() -> None:
    """A law study whose budgets searched the batch carries lr*(D, B) to the export: the LR at
    the batch the export writes is that law's, not the line in D alone (which it would refuse
    off the batches it measured)."""
    from tuner.modeling.laws.lr_at_batch import LawBatches, lr_at_batch
    from tuner.modeling.laws.power_law import StudyLaw, fit_power_law

    two_d = fit_lr_batch_law(_exact_cells(noise=0.05))
    line = fit_power_law(battery.TOKENS, [1e-3] * len(battery.TOKENS),
                         [[1e-3] * 4 for _ in battery.TOKENS])
    batches = LawBatches.of(battery.BATCHES)
    far = 8 * battery.HELD_B
    alone = lr_at_batch(StudyLaw(name="s", variable="tokens", lr=line), tokens=battery.FAR_D,
                        batch=far, flops_per_token=1.0, batches=batches)
    assert alone.lr is None and alone.refusal  # the line in D alone says nothing at that batch
    got = lr_at_batch(StudyLaw(name="s", variable="tokens", lr=line, lr_batch=two_d),
                      tokens=battery.FAR_D, batch=far, flops_per_token=1.0, batches=batches)
    assert not got.refusal and got.valid_at_batch is None
    assert got.lr == pytest.approx(two_d.at(battery.FAR_D, far))
    assert got.decades_batch == pytest.approx(math.log10(32))


def _fit_table_law(tmp_path) -> tuple[LrBatchLaw, str]:
    runs = tmp_path / "runs.csv"
    _write_runs(runs)
    out = tmp_path / "law"
    assert main(["law", "fit", str(runs), "--column", "B=bs", "--batch-unit", "2048",
                 "--vary", "smooth loss", "--out", str(out)]) == 0
    path = out / "law.json"
    return LrBatchLaw.from_dict(json.loads(path.read_text())["lr_batch_law"]), str(path)


def test_an_export_takes_its_lr_from_a_table_law_at_the_batch_it_writes(tmp_path, capsys):
    """`moetune export --law law.json`: the table law's lr*(D, B) is read at the full run's
    tokens and the batch written, with its band as numbers, and moves the published recipes'
    prior by its weight there; another batch gets another LR. The file calls it a table's law
    and warns of no held-out budget, which a table does not have."""
    from tests.tuner.test_export import CONFIGS, _sqlite_study

    law, path = _fit_table_law(tmp_path)
    url = _sqlite_study(tmp_path)
    lrs = []
    for sequences in (512, 2048):
        out = tmp_path / f"full-{sequences}.json"
        argv = ["export", "synthetic", "--storage", url, "--target",
                str(CONFIGS / "config_16B.json"), "--gpus", "64", "--tokens", "1e12",
                "--global-batch", str(sequences), "--law", path, "--out", str(out)]
        capsys.readouterr()
        rc = main([*argv, "--lr-wide-band"])
        assert rc == 0, capsys.readouterr().err
        written = json.loads(out.read_text())
        lr = written["lr"]
        assert lr["for_batch_tokens"] == sequences * 4096 and lr["valid_at_batch"] is None
        answer = lr["answer"]
        assert answer["law_used"] and answer["law_lr"] == pytest.approx(
            law.at(1e12, sequences * 4096.0))
        assert answer["band"][0] < lr["lr"] < answer["band"][1]
        band = lr["band"]  # the table law's own reading, as numbers
        assert band["lo"] < answer["law_lr"] < band["hi"]
        assert band["decades_past_tokens"] > 5 and band["decades_past_batch"] > 1
        rule = next(r["rule"] for r in written["rules"] if r["field"] == "lr")
        assert "fitted from a table of runs, law.json" in rule and "study's own" not in rule
        assert not any("held-out budget" in w for w in written["warnings"])
        lrs.append(lr["lr"])
    assert lrs[0] != pytest.approx(lrs[1], rel=0.05)  # the coupling to the batch is carried


@pytest.mark.parametrize("content, words", [
    ("not json", "--law: must be a law.json written by `moetune law fit`"),
    ('{"lr_batch_law": null}', "--law: must hold a law in tokens and batch"),
    ('{"lr_batch_law": {"terms": ["1"]}}', "--law: its 'lr_batch_law' must be as"),
])
def test_a_bad_law_file_exits_2_naming_law_and_writes_nothing(tmp_path, capsys, content, words):
    from tests.tuner.test_export import CONFIGS, _sqlite_study

    url = _sqlite_study(tmp_path)
    bad, out = tmp_path / "law.json", tmp_path / "full.json"
    bad.write_text(content)
    rc = main(["export", "synthetic", "--storage", url, "--target",
               str(CONFIGS / "config_16B.json"), "--gpus", "64", "--tokens", "1e12",
               "--law", str(bad), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and words in err and "Traceback" not in err
    assert not out.exists()


def test_a_table_law_is_refused_for_a_study_trained_under_mup(tmp_path, capsys, monkeypatch):
    """A table's law gives one LR for every parameter; a µP study's LR is the base LR."""
    import dataclasses

    from tests.tuner import test_export

    _, path = _fit_table_law(tmp_path)
    monkeypatch.setattr(test_export, "PROXY", dataclasses.replace(test_export.PROXY,
                                                                  mup_base_dim=32))
    url = test_export._sqlite_study(tmp_path)
    out = tmp_path / "full.json"
    rc = main(["export", "synthetic", "--storage", url, "--target",
               str(test_export.CONFIGS / "config_16B.json"), "--gpus", "64", "--tokens",
               "1e12", "--law", path, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "--law:" in err and "trained under muP" in err and not out.exists()


def test_a_bend_the_cells_show_widens_the_band_past_them_and_the_band_holds_lr() -> None:
    """Cells on the bent truth (no noise beyond se): the bend is believed, the band seven
    decades out is the mixture's (wide) and still holds the linear law's lr*, which stays put."""
    bent = [Cell(tokens=d, batch=b, se=0.02, lr=10 ** battery.true_log_lr("bent", d, b))
            for d in battery.TOKENS for b in battery.BATCHES]
    law = fit_lr_batch_law(bent)
    straight = fit_lr_batch_law(_exact_cells(se=0.02))  # as precise, on the straight truth
    assert law.bend_shrink > 0.8 and not straight.left_out
    for d in (battery.FAR_D, 1e7 * battery.TOKENS[-1]):
        lo, hi = law.band(d, 810.0)
        assert lo <= law.at(d, 810.0) <= hi
        s_lo, s_hi = straight.band(d, 810.0)
        assert math.log10(hi / lo) > 3 * math.log10(s_hi / s_lo)
    lo, hi = law.band(battery.FAR_D, 810.0)  # and it covers the bent truth there
    assert math.log10(lo) <= battery.true_log_lr("bent", battery.FAR_D, 810.0) <= math.log10(hi)


def test_a_law_json_written_before_the_bent_covariance_still_reads() -> None:
    d = fit_lr_batch_law(_exact_cells(noise=0.05)).to_dict()
    del d["bent_cov"]
    old = LrBatchLaw.from_dict(d)
    lo, hi = old.band(battery.HELD_D, 810.0)
    assert lo < old.at(battery.HELD_D, 810.0) < hi


def _cells_of(truth, noise: float, seed: int = 0) -> list[Cell]:
    """Cells of ``truth(D, B)`` (log10 lr*), each measured with noise ``noise`` (its se)."""
    rng = np.random.default_rng(seed)
    return [Cell(tokens=d, batch=b, se=noise, lr=10 ** (truth(d, b) + rng.normal(0, noise)))
            for d in battery.TOKENS for b in battery.BATCHES]


def test_the_d_by_b_term_says_whether_the_cells_resolve_it_and_what_it_gives_far_out() -> None:
    """Far past the cells the D x B term is multiplied by both distances. A term the cells
    resolve stays in lr* and the law states its share of the answer; one they cannot tell from
    zero (|t| < 2) is left out of lr*, the band mixes in the law that keeps it, and every
    statement says what keeping it would give there."""
    from reports.laws.law import lr_batch_lines
    from tuner.modeling.laws.lr_at_batch import lr_at_batch

    truth = lambda d, b: battery.true_log_lr("loglinear", d, b)  # noqa: E731 - has a D x B term
    resolved = fit_lr_batch_law(_cells_of(truth, noise=0.01))
    far_d, far_b = 1e13, 6e7
    info = resolved.interaction(far_d, far_b)
    assert info is not None and info["resolved"] and not info["left_out"]
    assert abs(info["t"]) >= 2 and info["coef"] == pytest.approx(0.1, abs=0.02)
    u = math.log10(far_d) - resolved.centre[0]
    v = math.log10(far_b) - resolved.centre[1]
    assert info["decades"] == pytest.approx(info["coef"] * u * v)
    rule = lr_at_batch(resolved, tokens=far_d, batch=far_b, flops_per_token=1.0).rule
    assert f"of which the D x B term ({info['coef']:+.3g}" in rule
    assert f"gives {info['decades']:+.2f} decades" in rule
    assert "the cells resolve it." in "\n".join(lr_batch_lines({"lr_batch_law":
                                                               resolved.to_dict()}))

    vague = fit_lr_batch_law(_cells_of(truth, noise=0.08))  # the same truth, noisy cells
    gone = vague.interaction(far_d, far_b)
    assert gone is not None and gone["left_out"] and abs(gone["t"]) < 2
    assert "uv" not in vague.terms and vague.left_out[0][0] == "uv"
    assert gone["decades"] == 0.0
    assert gone["decades_if_kept"] == pytest.approx(gone["coef"] * (
        math.log10(far_d) - vague.centre[0]) * (math.log10(far_b) - vague.centre[1]))
    lo, hi = vague.band(far_d, far_b)  # the band still holds the truth, term and all
    assert math.log10(lo) <= truth(far_d, far_b) <= math.log10(hi)
    rule = lr_at_batch(vague, tokens=far_d, batch=far_b, flops_per_token=1.0).rule
    assert "not resolved by the cells) is left out of lr*" in rule
    assert f"kept, it would give {gone['decades_if_kept']:+.2f} decades here" in rule
    data = {"lr_batch_law": vague.to_dict(), "full_run": {"tokens": far_d, "batch": far_b}}
    text = "\n".join(lr_batch_lines(data))
    assert f"The D x B term is {gone['coef']:+.3f} ± {gone['se']:.3f}" in text
    assert "so lr* leaves it out" in text and "log D·log B" not in text
    assert f"it would give {gone['decades_if_kept']:+.2f} decades of log10 lr*" in text
    again = LrBatchLaw.from_dict(vague.to_dict())  # law.json keeps the choice
    assert again.left_out == vague.left_out and again.band(far_d, far_b) == (lo, hi)


def test_the_backtest_gives_the_d_by_b_terms_share_of_each_row() -> None:
    from tests.tuner.test_export_lr_at_batch import PROXY
    from tuner.export.backtest import backtest, backtest_lines, backtest_table

    law = fit_lr_batch_law(_cells_of(
        lambda d, b: battery.true_log_lr("loglinear", d, b), noise=0.01))
    rows = backtest(law, proxy=PROXY)
    for r in rows:
        want = law.interaction(r["tokens"], r["batch_tokens"])
        assert r["interaction"] == want and want is not None
        assert f"{want['decades']:+.2f} decades (|t| = {abs(want['t']):.1f}, resolved)" in \
            backtest_table(rows)
    assert all("; its D x B term: " in line and "decades (|t| = " in line
               for line in backtest_lines(rows))
    vague = fit_lr_batch_law(_cells_of(
        lambda d, b: battery.true_log_lr("loglinear", d, b), noise=0.08))
    rows = backtest(vague, proxy=PROXY)
    kept = rows[-1]["interaction"]["decades_if_kept"]
    assert f"not resolved); kept: {kept:+.2f} decades |" in backtest_table(rows)


def _held_out_batch_fit(trials: tuple, **budget: Any) -> Any:
    """A law fit holding only a held-out batch at 524,288 tokens and 8,192 tokens per step,
    with ``trials`` as its own search and an lr of 0.02 [0.005, 0.08] predicted for it."""
    from tuner.study.workflows.law_fit import BudgetResult, LawFit

    hob = BudgetResult(index=5, study="s.b64", tokens=524288, compute=524288.0,
                       held_out=False, n_trials=len(trials), error="", trials=trials,
                       held_out_batch=True, **budget)
    return LawFit(name="s", variable="tokens", flops_per_token=1.0, params=1.0,
                  budgets=(hob,), lr_law=None, batch_law=None, predicted={},
                  predicted_batch={"tokens": 524288, "batch": 8192.0, "lr": 0.02,
                                   "lr_band": [0.005, 0.08], "decades_past": {"batch": 0.6}})


def test_the_held_out_batch_is_measured_as_the_laws_cells_are_with_the_surface_beside() -> None:
    """Like with like: the held-out batch's measured lr* is the cells' estimator (a quadratic
    near the best trial), as the law's cells were found; the budget's whole-range quadratic is
    given beside it with the factor between them. A bowl steep below its bottom and flat above
    it over a decade (as the grid's 64-step held-out batch was) pulls the whole-range
    quadratic's vertex off the bottom: the two estimates differ, and law.md says the check
    cannot pin lr* closer."""
    from reports.laws.law import _held_batch
    from tuner.modeling.laws.lr_batch_law import cell_optimum
    from tuner.modeling.laws.response_surface import fit_optimum

    xs = np.linspace(-3.4, -1.3, 24)  # log10 lr over the searched range
    bottom = -1.6  # a bottom at the top of a decade-wide shelf, with a steep wall below it
    losses = [2.7 + (0.05 if x < bottom else 4.0) * (x - bottom) ** 2
              + 3.0 * max(0.0, -2.6 - x) ** 2 for x in xs]
    trials = tuple((10 ** x, 8192.0, z) for x, z in zip(xs, losses))
    surface = fit_optimum([t[0] for t in trials], [1.0] * len(trials), losses, seed=5)
    check = _held_out_batch_fit(trials, optimum=surface, best={}, noise_sd=None,
                                predicted_trial={}).held_out_batch_check()
    assert check is not None
    cell, _ = cell_optimum([t[0] for t in trials], losses, seed=5)
    assert check["lr_measured"] == pytest.approx(cell.lr)
    assert check["lr_surface"] == pytest.approx(surface.lr)
    # the cells' estimate lies nearer the true bottom than the whole-range quadratic's
    assert abs(math.log10(cell.lr) - bottom) < abs(math.log10(surface.lr) - bottom)
    assert check["lr_ratio"] == pytest.approx(0.02 / cell.lr)
    spread = max(cell.lr / surface.lr, surface.lr / cell.lr)
    assert check["estimator_spread"] == pytest.approx(spread) and spread > 1.5
    text = "\n".join(_held_batch({"budgets": [{"held_out_batch": True}],
                                  "held_out_batch_check": check}))
    assert f"puts the optimum at {surface.lr:.3g}" in text
    assert "this check cannot pin lr* closer than that" in text


def test_the_held_out_batch_says_what_following_its_prediction_cost() -> None:
    """Where a flat bowl leaves lr* unpinned, the held-out batch gives what the held-out
    budget gives: the predicted recipe's own trial against the optimum and the best searched
    trial, in loss, noise sd and percent, and law.md says it."""
    from reports.laws.law import _held_batch

    xs = np.linspace(-3.4, -1.3, 24)
    losses = [2.7 + 0.5 * (x + 2.0) ** 2 for x in xs]
    trials = tuple((10 ** x, 8192.0, z) for x, z in zip(xs, losses))
    best = min(range(24), key=lambda i: losses[i])
    check = _held_out_batch_fit(
        trials, optimum=None, noise_sd=0.05,
        best={"number": best, "lr": trials[best][0], "batch": 8192.0, "loss": losses[best]},
        predicted_trial={"number": 24, "lr": 0.02, "batch": 8192.0, "loss": 2.85}
    ).held_out_batch_check()
    assert check is not None
    assert check["loss_gap_best"] == pytest.approx(2.85 - losses[best])
    assert check["loss_gap_best_sd"] == pytest.approx((2.85 - losses[best]) / 0.05)
    assert check["loss_gap"] == pytest.approx(2.85 - check["loss_optimum"])
    assert check["sd"] == 0.05 and check["sd_measured"]
    text = "\n".join(_held_batch({"budgets": [{"held_out_batch": True}],
                                  "held_out_batch_check": check}))
    assert ("The predicted recipe's val_loss 2.8500 (measured) against the held-out batch's "
            "optimum") in text
    assert f"{check['loss_gap_best_sd']:+.2f} sd" in text


def test_a_tables_law_md_names_only_the_terms_it_has_and_says_what_it_left_out(tmp_path):
    """A table at one model size: law.md names no N term (w) it does not have, says the law
    was fitted at that one size, and whether the cells resolve the D x B term (law.json lists
    a term left out; law.md said nothing of it)."""
    _, path = _fit_table_law(tmp_path)
    md = (Path(path).parent / "law.md").read_text()
    assert "u, v = log10 D, B minus" in md and "w = log10" not in md
    assert "Fitted at one model size, N = 1e+08" in md
    assert "The D x B term is " in md and ("it is in lr*" in md or "leaves it out" in md)


def _noise_scale_truth(tokens: float, batch: float) -> float:
    """log10 lr* growing as B^0.7 below a noise scale B_noise = 800·(D/2e5)^0.8 and flat above
    it (McCandlish et al. 2018): the D-exponent is −0.56 at small batch and 0 at large."""
    b_noise = 800 * (tokens / 2e5) ** 0.8
    return -2.5 - math.log10(1 + (b_noise / batch) ** 0.7)


SATURATED_BATCHES = (128.0, 512.0, 2048.0, 8192.0)


@pytest.mark.parametrize("seed", range(4))
def test_a_saturating_truth_is_fitted_by_the_noise_scale_form_whose_band_covers_it(seed):
    """Past the largest batch the truth is flat while a law linear in log B keeps climbing:
    the log-linear form's band misses there, the chosen noise-scale form's holds the truth
    (and is narrower)."""
    rng = np.random.default_rng(seed)
    cells = [Cell(tokens=d, batch=b, se=0.02,
                  lr=10 ** (_noise_scale_truth(d, b) + rng.normal(0, 0.02)))
             for d in battery.TOKENS for b in SATURATED_BATCHES]
    linear, chosen = fit_lr_batch_law(cells, shape="log-linear"), fit_lr_batch_law(cells)
    assert chosen.shape == "noise-scale" and linear.shape == "log-linear"
    assert dict(chosen.aicc)["noise-scale"] < dict(chosen.aicc)["log-linear"]
    for d, b in [(battery.TOKENS[-1], 16 * SATURATED_BATCHES[-1]),
                 (battery.TOKENS[-1], 64 * SATURATED_BATCHES[-1])]:
        truth = _noise_scale_truth(d, b)
        lo, hi = linear.band(d, b)
        assert not math.log10(lo) <= truth <= math.log10(hi)
        n_lo, n_hi = chosen.band(d, b)
        assert math.log10(n_lo) <= truth <= math.log10(n_hi)
        assert n_hi / n_lo < hi / lo


@pytest.mark.parametrize("seed", range(4))
def test_the_log_linear_form_is_kept_on_a_log_linear_truth(seed) -> None:
    law = fit_lr_batch_law(_exact_cells(noise=0.03, seed=seed, se=0.03))
    assert law.shape == "log-linear"
    assert dict(law.aicc)["log-linear"] <= dict(law.aicc)["noise-scale"]


def test_a_noise_scale_law_round_trips_and_an_old_law_json_reads_as_log_linear() -> None:
    rng = np.random.default_rng(0)
    cells = [Cell(tokens=d, batch=b, se=0.02,
                  lr=10 ** (_noise_scale_truth(d, b) + rng.normal(0, 0.02)))
             for d in battery.TOKENS for b in SATURATED_BATCHES]
    law = fit_lr_batch_law(cells)
    back = LrBatchLaw.from_dict(json.loads(json.dumps(law.to_dict())))
    assert back.shape == "noise-scale" and back.aicc == law.aicc
    for d, b in [(battery.FAR_D, 4096.0), (2e5, 100.0)]:
        assert back.at(d, b) == pytest.approx(law.at(d, b))
        assert back.band(d, b) == pytest.approx(law.band(d, b))
    assert "noise-scale" in law.to_dict()["form"]
    old = fit_lr_batch_law(_exact_cells(noise=0.05), shape="log-linear").to_dict()
    at = LrBatchLaw.from_dict(old).at(battery.FAR_D, 4096.0)
    del old["shape"], old["aicc"]  # law.json as written before the noise-scale form
    again = LrBatchLaw.from_dict(old)
    assert again.shape == "log-linear" and again.at(battery.FAR_D, 4096.0) == at


def test_the_noise_scale_forms_exponents_are_its_local_slopes() -> None:
    law = fit_lr_batch_law([Cell(tokens=d, batch=b, se=0.01, lr=10 ** _noise_scale_truth(d, b))
                            for d in battery.TOKENS for b in SATURATED_BATCHES])
    assert law.shape == "noise-scale"
    d_mid = 10 ** law.centre[0]
    # at small batch lr* ≈ (B / B_noise)^0.7: D-exponent −0.7·0.8; far above B_noise, flat
    assert law.tokens_exponent(1.0) == pytest.approx(-0.56, abs=0.02)
    assert law.tokens_exponent(1e9) == pytest.approx(0.0, abs=0.02)
    assert law.batch_exponent(d_mid) == pytest.approx(
        (_noise_scale_truth(d_mid, 10 ** (law.centre[1] + 1e-3))
         - _noise_scale_truth(d_mid, 10 ** (law.centre[1] - 1e-3))) / 2e-3, abs=0.02)


def test_an_unknown_shape_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="shape: must be one of .*but got 'quadratic'"):
        fit_lr_batch_law(_exact_cells(), shape="quadratic")


def test_a_tables_law_md_states_the_form_the_fit_chose(tmp_path):
    """law.md printed the log-linear formula over a noise-scale fit's coefficients; it names
    the form law.json records."""
    from reports.laws.law_table import law_table_markdown

    _, path = _fit_table_law(tmp_path)
    data = json.loads(Path(path).read_text())
    as_noise = dict(data["lr_batch_law"], shape="noise-scale")
    other = LrBatchLaw.from_dict(as_noise)
    text = law_table_markdown(dict(data, lr_batch_law=as_noise))
    assert other.describe() in text and "cB·v + cDB·u·v" not in text
