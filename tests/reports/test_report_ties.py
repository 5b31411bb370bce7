"""ranked.md marks the trials whose val_loss is within the measured noise of the best as tied."""

from __future__ import annotations

from synthetic_studies import add, new_study

import reports
from tuner.study import records


def ranked_md(study, tmp_path) -> str:
    return reports.build(study, tmp_path)["ranked_md"].read_text()


def rows_of(md: str) -> dict[str, str]:
    """trial label ('#3') -> its table row."""
    return {line.split("|")[2].strip(): line for line in md.splitlines()
            if line.startswith("| ") and "#" in line.split("|")[2]}


def test_trials_within_the_noise_of_the_best_are_marked_tied(tmp_path):
    study = new_study(objectives=[["val_loss", "minimize"]])
    for loss in (2.50, 2.00, 2.015, 2.10):
        add(study, values=[loss], params={"lr": 1e-3 * loss, "warmup_fraction": 0.05,
                                          "precision": "bf16"})
    study.set_user_attr(records.NOISE, {"sd": 0.02, "n": 6, "how": "2 recipe(s) x 3 seeds"})
    md = ranked_md(study, tmp_path / "a")
    rows = rows_of(md)
    assert rows["#1"].rstrip(" |").endswith("best")
    assert "**tied** (+0.015)" in rows["#2"]
    assert "tied" not in rows["#3"] and "tied" not in rows["#0"]
    assert "within the measured run-to-run noise (±0.02)" in md


def test_without_a_noise_measurement_nothing_is_called_tied(tmp_path):
    study = new_study(objectives=[["val_loss", "minimize"]])
    for loss in (2.00, 2.001):
        add(study, values=[loss], params={"lr": 1e-3 * loss, "warmup_fraction": 0.05,
                                          "precision": "bf16"})
    md = ranked_md(study, tmp_path)
    assert "| #1 |" in md and "tied" not in md
