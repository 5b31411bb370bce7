"""A study written by the real runner (fake trainer, real Ray Tune + Optuna) reports cleanly."""

from __future__ import annotations

import numpy as np
import optuna
import pandas as pd
import pytest
from test_report_pareto import brute_force_ranks

import reports
from tuner import testing
from tuner.study.run.runner import run_study
from tuner.study.specs.spec import spec_from_dict

pytestmark = pytest.mark.usefixtures("ray_session")


def test_report_of_a_runner_study(tmp_path) -> None:
    spec = spec_from_dict({
        "study": {"name": "runner-report", "n_trials": 6, "max_concurrent": 2, "seed": 0},
        "budget": {"tokens_per_trial": 300, "eval_every_tokens": 100},
        "objectives": {"val_loss": "minimize", "tokens_per_s": "maximize"},
        "constraints": {"max_peak_memory_gb": 4.0, "min_tokens_per_s": 1.0},
        "pruning": {"scheduler": "none"},
        "space": {"params": {
            "lr": {"type": "float", "low": 1e-4, "high": 3e-2, "log": True},
            "warmup_fraction": {"type": "float", "low": 0.0, "high": 0.2}}},
    })
    summary = run_study(spec, run_dir=tmp_path / spec.name, trainer=testing.quick_train,
                        progress=False)
    study = optuna.load_study(study_name=spec.name, storage=summary.storage)
    paths = reports.build(study, tmp_path / "report")
    df = pd.read_csv(paths["trials_csv"])
    assert len(df) == len(study.trials) == 6
    assert set(df["outcome"]) == {"complete"} and df["feasible"].all()
    pts = df[["objective.val_loss", "objective.tokens_per_s"]].to_numpy() * np.array([1, -1])
    assert df["pareto_rank"].astype(int).tolist() == brute_force_ranks(pts)
    md = paths["ranked_md"].read_text()
    assert "Objective `tokens_per_s`: maximize (measured)" in md
    assert "Constraint `max_peak_memory_gb`: peak_memory_gb <= 4" in md
    assert "Constraint `min_tokens_per_s`: tokens_per_s >= 1" in md  # a lower bound
    assert df["peak_memory_gb"].tolist() == pytest.approx([1.0] * 6)  # 2**30 bytes = 1 GiB
