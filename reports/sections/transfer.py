"""Transfer confidence: what `moetune validate` recorded about the ranking surviving scale.

`moetune validate STUDY --top K --scale S` re-trains the top-K recipes on a proxy S times wider
(and/or longer) and stores the outcome in the study (`tuner.study.store.records.VALIDATION`);
reports show
it so nobody exports a recipe whose rank did not survive scale without seeing that.
"""

from __future__ import annotations

from typing import Any

from tuner.study.store import records


def validation_lines(study_user_attrs: dict[str, Any], study: str = "STUDY") -> list[str]:
    """Plain sentences (markdown-safe) describing the stored validation, or the command that
    runs it for the study named ``study``."""
    v = study_user_attrs.get(records.VALIDATION)
    if not v:
        return [f"Not checked yet: `moetune validate {study} --top 5 --scale 2` re-trains the "
                "top recipes on a larger proxy and records whether their ranking survives."]
    rho = v.get("spearman")
    stays = "stays on top" if v.get("chosen_stays_on_top") else (
        f"does NOT stay on top (trial #{v.get('best_at_scale')} wins at scale)")
    lines = [f"Top {v.get('top')} recipes re-trained at {v.get('scale')}× width, "
             f"{v.get('tokens'):,} tokens [{v.get('label', 'measured')}], on {v.get('date')}: "
             f"Spearman rank correlation {_fmt(rho)}; the chosen trial #{v.get('chosen_trial')} "
             f"{stays}."]
    for row in v.get("rows", []):
        lines.append(f"trial #{row['trial']}: proxy val_loss {_fmt(row['proxy_val_loss'])} → "
                     f"scaled {_fmt(row['scaled_val_loss'])}"
                     + (" (diverged)" if row.get("diverged") else ""))
    return lines


def _fmt(x: Any) -> str:
    try:
        return f"{float(x):.4g}"
    except (TypeError, ValueError):
        return str(x)
