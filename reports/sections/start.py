"""The report's "Start" section: what the study evaluated first and what it warm-started from.

Baselines and enqueued points (`tuner.study.run.start`) are trials of the study like any
other: they are ranked, and this section says which trials they are, where they stand, and what a
baseline's mapping to the proxy had to clip. Warm-start trials (`tuner.study.run.warm_start`)
were measured by another study, at its proxy and budget: the sampler saw them, the ranking does
not, and this section says how many there are and from where.
"""

from __future__ import annotations

import html as html_lib
import math
from collections import Counter
from typing import Any

import pandas as pd

from reports.analysis.snapshot import Snapshot
from reports.sections.markdown import md_text
from tuner.study.store import records


def start_items(snapshot: Snapshot) -> list[str]:
    """One plain-text line per start trial and per warm-start source; empty without either."""
    start: dict[str, Any] = snapshot.study_user_attrs.get(records.START) or {}
    rows = {int(row["number"]): row for _, row in snapshot.frame.iterrows()}
    fields = {t.number: t.user_attrs.get(records.START_POINT) for t in snapshot.trials}
    out = []
    for r in snapshot.records:
        if r.origin and not r.warm_start:
            field = f" ({fields[r.number]})" if fields.get(r.number) else ""
            out.append(f"trial #{r.number}: {r.origin}{field} — {_standing(rows[r.number])}")
    for p in start.get("points", []):
        out += [f"{p['point']}: {note}" for note in p.get("notes", [])]
    warm = Counter(r.origin.partition(":")[2] for r in snapshot.records if r.warm_start)
    info = start.get("warm_start") or {}
    for name, n in warm.items():
        mine = info if info.get("study") == name else {}
        where = f" (storage {mine['storage']})" if mine.get("storage") else ""
        skipped = mine.get("skipped") or {}
        why = "; ".join(f"{k}: {v}" for k, v in skipped.items())
        out.append(f"warm start from {name}{where}: {n} trials, not ranked — measured at that "
                   f"study's proxy and budget; the sampler saw them, the ranking, fronts, knee "
                   f"and export leave them out"
                   + (f"; skipped {sum(skipped.values())} ({why})" if skipped else ""))
    return out


def markdown(snapshot: Snapshot) -> list[str]:
    """The section for ranked.md (no lines without baselines, enqueued points or a warm start)."""
    items = start_items(snapshot)
    if not items:
        return []
    return ["## Start", "", *[f"- {md_text(x)}" for x in items], ""]


def html(snapshot: Snapshot) -> str:
    """The section for report.html ("" without baselines, enqueued points or a warm start)."""
    items = start_items(snapshot)
    if not items:
        return ""
    return "<h2>Start</h2><ul>" + "".join(f"<li>{html_lib.escape(x)}</li>" for x in items) \
        + "</ul>"


def _standing(row: pd.Series) -> str:
    if bool(row["feasible"]):
        rank = row["pareto_rank"]
        return f"feasible, Pareto rank {int(rank)}" if not _missing(rank) else "feasible"
    reason = str(row.get("reason") or "")
    return f"{row['outcome']}" + (f" ({reason})" if reason else "")


def _missing(v: object) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))
