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


def test_a_target_unreadable_since_submit_leaves_the_grid_and_says_so(tmp_path, monkeypatch):
    """The page's one-line answer needs the target's config; where it cannot be read any more
    (a config file removed since the study was submitted), the grid still shows and says why
    there is no answer, naming no path."""
    from reports.laws import law as law_report
    from tests.tuner.test_law_status import law_storage
    from trainers.config.validation import field_error
    from tuner.app.requests import law_grid as grid_module
    from tuner.study.store import database as db

    def unreadable(fit, spec, studies):
        raise field_error("target", "must be a readable file", "/data/gone.json")

    monkeypatch.setattr(law_report, "full_run_view", unreadable)
    monkeypatch.setattr(grid_module, "_FITS", {})  # no fit cached by another test
    root = law_storage(tmp_path / "runs")
    study = optuna.load_study(study_name="law", storage=db.storage_url(root / "law"))
    grid = law_grid(study, driven=False)
    assert [b["state"] for b in grid["budgets"]][:2] == ["done", "done"]
    assert grid["answer"] == "law law: no full-run answer (its target cannot be read now)."
    assert "gone" not in repr(grid)
