"""Reports show whether the ranking survived `moetune validate`, or that it was never checked."""

from __future__ import annotations

from reports.sections.transfer import validation_lines
from tuner.study.store import records

RECORD = {"label": "measured", "top": 3, "scale": 2, "tokens": 400000, "date": "2026-11-29",
          "spearman": 0.5, "chosen_trial": 4, "chosen_stays_on_top": False, "best_at_scale": 7,
          "rows": [{"trial": 4, "proxy_val_loss": 2.5, "scaled_val_loss": 2.4, "diverged": False},
                   {"trial": 7, "proxy_val_loss": 2.6, "scaled_val_loss": 2.3, "diverged": False},
                   {"trial": 1, "proxy_val_loss": 2.7, "scaled_val_loss": "inf",
                    "diverged": True}]}


def test_unvalidated_study_says_how_to_check():
    assert "moetune validate" in validation_lines({})[0]


def test_validated_study_states_rank_correlation_and_the_loser():
    lines = validation_lines({records.VALIDATION: RECORD})
    assert "Spearman rank correlation 0.5" in lines[0] and "[measured]" in lines[0]
    assert "does NOT stay on top (trial #7 wins at scale)" in lines[0]
    assert len(lines) == 4 and "(diverged)" in lines[3]
