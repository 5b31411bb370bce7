"""The service page's law grid (`tuner.app.requests.law_grid`) for the shipped law design."""

from __future__ import annotations

from pathlib import Path

import optuna

from tuner.app.requests.law_grid import law_grid
from tuner.study.specs.spec import load_spec
from tuner.study.store import storage as st

LAW_TOML = Path(__file__).resolve().parents[2] / "search_spaces" / "law.toml"


def test_the_grid_names_the_held_out_batch_and_counts_its_predicted_trial(tmp_path):
    """The held-out batch is a budget of its own: the grid names it (not an unlabelled budget
    row) and counts its predicted first trial, as for the held-out budget, so it does not read
    done one trial early."""
    spec = load_spec(LAW_TOML)
    assert spec.law.held_out_batch  # the shipped design has one
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'study.db'}")
    grid = law_grid(st.create_study(spec, storage), driven=False)
    *others, last = grid["budgets"]
    trials = spec.law.trials or spec.study.n_trials
    assert last["held_out_batch"] == spec.law.held_out_batch and last["total"] == trials + 1
    assert [b["held_out_batch"] for b in others] == [None] * len(others)
    held = [b for b in others if b["held_out"]]
    assert len(held) == 1 and held[0]["total"] == trials + 1
