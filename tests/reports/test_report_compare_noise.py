"""`moetune compare` names a winner only outside the measured noise, and says which noise and n
it used; without a noise estimate it cannot judge."""

from __future__ import annotations

import argparse

import numpy as np
from synthetic_studies import add, new_study

import reports
from reports.analysis.hypervolume import hypervolume
from tuner.study.store import records

SINGLE = [["val_loss", "minimize"]]


def study(name, points, *, sd=None, objectives=None):
    s = new_study(name, objectives=objectives or [["val_loss", "minimize"],
                                                  ["peak_memory_gb", "minimize"]])
    s.set_user_attr(records.SPEC, {"budget": {"tokens_per_trial": 100_000}})
    for v in points:
        add(s, values=list(v), constraints={"max_peak_memory_gb": -1.0},
            params={"lr": 1e-3 * v[0], "warmup_fraction": 0.05, "precision": "bf16"})
    if sd is not None:
        s.set_user_attr(records.NOISE, {"sd": sd, "n": 6, "how": "2 recipe(s) x 3 seeds",
                                        "trials": [0, 1]})
    return s


def verdict(a, b, tmp_path) -> str:
    md = reports.compare(a, b, tmp_path)["compare_md"].read_text()
    return md.split("## Verdict")[1]


def test_best_values_within_the_noise_cannot_be_told_apart(tmp_path):
    a = study("a", [(2.000,), (2.4,)], sd=0.02, objectives=SINGLE)
    b = study("b", [(2.010,), (2.3,)], sd=0.02, objectives=SINGLE)
    text = verdict(a, b, tmp_path)
    assert "**Cannot tell apart**: best val_loss: a 2, b 2.01 (difference 0.01)" in text
    assert "inside the measured run-to-run noise (±0.02)" in text and "is better" not in text
    assert "Noise used: val_loss sd ±0.02, pooled over n = 12 runs" in text


def test_best_values_far_outside_the_noise_name_the_winner(tmp_path):
    a = study("a", [(2.000,), (2.4,)], sd=0.002, objectives=SINGLE)
    b = study("b", [(2.010,), (2.3,)], sd=0.002, objectives=SINGLE)
    text = verdict(a, b, tmp_path)
    assert "**a** is better: best val_loss: a 2, b 2.01" in text
    assert "larger than the measured run-to-run noise (±0.002)" in text


def test_fronts_within_the_noise_cannot_be_told_apart(tmp_path):
    a = study("a", [(2.00, 2.0), (2.5, 1.0), (3.0, 3.0)], sd=0.02)
    b = study("b", [(2.01, 2.0), (2.51, 1.0), (3.0, 3.0)], sd=0.03)
    text = verdict(a, b, tmp_path)
    assert "**Cannot tell apart**: hypervolume a " in text and "is better" not in text
    assert "(±0.0255 on val_loss; peak_memory_gb: no noise estimate, taken as exact)" in text
    # pooled over both studies' degrees of freedom: 6 runs of 2 recipes each, 4 + 4
    assert "val_loss sd ±0.0255, pooled over n = 12 runs (a: ±0.02 from n = 6 runs" in text


def test_fronts_far_apart_name_the_winner_with_its_worsened_hypervolume(tmp_path):
    a = study("a", [(2.00, 2.0), (2.5, 1.0), (3.0, 3.0)], sd=0.02)
    b = study("b", [(2.30, 2.0), (2.8, 1.0), (3.0, 3.0)])  # noise not measured in b
    md = reports.compare(a, b, tmp_path, reference_point=[3.5, 3.5])["compare_md"].read_text()
    hv = hypervolume(np.array([[2.0, 2.0], [2.5, 1.0]]), [3.5, 3.5])
    worse = hypervolume(np.array([[2.02, 2.0], [2.52, 1.0]]), [3.5, 3.5])  # val_loss + sd
    assert f"**a** is better: hypervolume a {hv:.6g}" in md
    assert f"its hypervolume is {worse:.6g}, still above b's" in md
    assert "b: not measured" in md and "assumed to hold for b" in md


def test_without_noise_compare_cannot_judge_and_says_how_to_measure(tmp_path, capsys):
    from tuner.app import report_command

    url = f"sqlite:///{tmp_path / 'both.db'}"
    for name, pts in (("a", [(2.0, 2.0), (2.5, 1.0)]), ("b", [(2.3, 2.0), (2.8, 1.0)])):
        target = new_study(name, storage=url)
        for t in study(name, pts).trials:
            target.add_trial(t)
    parser = argparse.ArgumentParser(prog="moetune")
    report_command.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["compare", "a", "b", "--storage", url, "--out",
                              str(tmp_path / "cmp")])
    assert args.handler(args) == 0
    out = capsys.readouterr().out
    assert "**Cannot judge**: hypervolume a " in out and "is better" not in out
    assert "run-to-run noise was not measured in either study (set `noise_repeats = 2`" in out
    assert "Noise used: none (a: not measured; b: not measured)." in out
    assert "Compared at equal budgets: 2 finished trials per study." in out


def test_the_larger_study_is_cut_to_the_smaller_ones_first_trials(tmp_path):
    # b's third trial would win by far, but a ran only two: it is not compared
    a = study("a", [(2.0,), (2.4,)], sd=0.02, objectives=SINGLE)
    b = study("b", [(2.5,), (2.6,), (1.0,)], sd=0.02, objectives=SINGLE)
    md = reports.compare(a, b, tmp_path)["compare_md"].read_text()
    assert "b finished 3 trials and a 2: only b's first 2 finished trials (#0–#1) are " in md
    assert "best val_loss: a 2, b 2.5" in md and "**a** is better" in md


TIMED = [["val_loss", "minimize"], ["timed_tokens_per_s", "maximize"]]


def timed_study(name, points, spread):
    s = new_study(name, objectives=TIMED)
    s.set_user_attr(records.SPEC, {"budget": {"tokens_per_trial": 100_000}})
    for v in points:
        add(s, values=list(v), constraints={"max_peak_memory_gb": -1.0},
            params={"lr": 1e-3 * v[0], "warmup_fraction": 0.05, "precision": "bf16"},
            timing={"tokens_per_s": v[1], "spread": spread, "repeats": 5})
    s.set_user_attr(records.NOISE, {"sd": 0.001, "n": 6, "how": "2 recipe(s) x 3 seeds",
                                    "trials": [0, 1]})
    return s


def test_a_timed_objective_is_judged_by_the_spread_of_its_timings(tmp_path):
    # b is 5% faster at equal val_loss: inside timings that spread 20% (±10%), outside 2% (±1%)
    fast = [(2.0, 21_000.0), (2.5, 31_500.0)]
    slow = [(2.0, 20_000.0), (2.5, 30_000.0)]
    text = verdict(timed_study("a", slow, 0.20), timed_study("b", fast, 0.20), tmp_path / "1")
    assert "**Cannot tell apart**" in text and "is better" not in text
    assert "±10.0% on timed_tokens_per_s (half the median range of its timings' repeats)" in text
    text = verdict(timed_study("a", slow, 0.02), timed_study("b", fast, 0.02), tmp_path / "2")
    assert "**b** is better" in text and "±1.0% on timed_tokens_per_s" in text
