"""The knee the report marks is the trial `moetune export --pick knee` takes: one ranking."""

from __future__ import annotations

import pytest
from synthetic_studies import random_study

import reports
from tuner.export.pick import Pick, pick_trial


@pytest.mark.parametrize("seed", range(6))
def test_the_report_marks_the_trial_export_takes(seed, tmp_path):
    study = random_study(n=30, seed=seed, trained=True)
    paths = reports.build(study, tmp_path)
    df = reports.trials_frame(study)
    marked = df.loc[df["knee"], "number"].tolist()
    picked = pick_trial(study, Pick(kind="knee")).record.number
    assert marked == [picked]
    front = df.loc[df["pareto_rank"] == 1, "number"].tolist()
    assert picked in front
    md = paths["ranked_md"].read_text()
    assert f"The knee of the Pareto set is trial #{picked}" in md
    row = next(line for line in md.splitlines() if line.startswith(f"| 1 | #{picked} |"))
    assert row.endswith("| **knee** |")
    assert "knee (export --pick knee)" in paths["report_html"].read_text()
