"""Two studies side by side: both Pareto fronts on one plot, hypervolumes under one reference.

Typical use: the same search space searched by two samplers. The studies are compared at equal
budgets (`reports.sections.verdict.equal_budgets`: same tokens per trial, the larger cut to the
smaller's first N finished trials), the reference point is derived once from the union of both
studies' feasible points (or given), so the two hypervolumes are comparable; it is stated in every
output. The verdict names a winner only when the difference is larger than the measured run-to-run
noise (`reports.sections.verdict.judge`), and says which noise and n it used.
"""

from __future__ import annotations

import html as html_lib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import optuna
import plotly.graph_objects as go
import plotly.offline
from matplotlib.figure import Figure

from reports.analysis.hypervolume import hypervolume
from reports.analysis.progress import feasible_points, pinned_reference
from reports.analysis.snapshot import Snapshot, take_snapshot
from reports.sections import labels
from reports.sections.verdict import Verdict, equal_budgets, judge
from tuner.study.results.ranking import to_minimization
from tuner.study.store import records

COLORS = ("#1f77b4", "#d62728")


def compare(study_a: optuna.Study, study_b: optuna.Study, out_dir: str | Path, *,
            reference_point: Sequence[float] | None = None) -> dict[str, Path]:
    """Write compare.md, compare.html and compare.png for two studies with the same objectives.

    Raises:
        ValueError: the studies' objectives (names and directions) differ, or their tokens per
            trial do (nothing is written then).
    """
    snaps = [take_snapshot(study_a), take_snapshot(study_b)]
    objs = [[(o.name, o.direction) for o in s.objectives] for s in snaps]
    if objs[0] != objs[1]:
        raise ValueError(f"compare: both studies must have the same objectives, but got "
                         f"{snaps[0].study_name}={objs[0]} and {snaps[1].study_name}={objs[1]}.")
    snaps, budget = equal_budgets(snaps)
    directions = [d for _, d in objs[0]]
    points = [feasible_points(s)[1] for s in snaps]
    union = np.vstack(points)
    if not len(union) and reference_point is None:
        raise ValueError("compare: neither study has a feasible trial, so there is no front.")
    ref = pinned_reference(union, directions, reference_point, scope="in both studies")
    ref_min = to_minimization(np.array([ref.values]), directions)[0]
    hvs = [hypervolume(to_minimization(p, directions), ref_min) if len(p) else 0.0
           for p in points]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"compare_md": out / "compare.md", "compare_html": out / "compare.html",
             "compare_png": out / "compare.png"}
    verdict = judge(snaps, points, hvs, ref_min)
    text = _markdown(snaps, hvs, ref.describe([n for n, _ in objs[0]]), budget, verdict)
    paths["compare_md"].write_text(text, encoding="utf-8")
    paths["compare_html"].write_text(_html(snaps, text), encoding="utf-8")
    _png(snaps, paths["compare_png"])
    return paths


def _front(s: Snapshot) -> tuple[np.ndarray, list[int]]:
    df = s.frame
    f = df[(df["pareto_rank"] == 1).fillna(False).astype(bool)].sort_values(s.objectives[0].column)
    return f[[o.column for o in s.objectives]].to_numpy(float), f["number"].tolist()


def _markdown(snaps: list[Snapshot], hvs: list[float], ref: str, budget: list[str],
              verdict: Verdict) -> str:
    lines = [f"# Compare `{snaps[0].study_name}` and `{snaps[1].study_name}`", "",
             " ".join(budget), "", f"Reference point {ref}.", "",
             "| study | trials | feasible | Pareto set | hypervolume |", "|---|---|---|---|---|"]
    for s, hv in zip(snaps, hvs, strict=True):
        lines.append(f"| {s.study_name} | {len(s.frame)} | {int(s.frame['feasible'].sum())} | "
                     f"{len(_front(s)[1])} | {hv:.6g} |")
    lines += ["", "## Verdict", "", verdict.text, "", verdict.noise, ""]
    lines += [f"> {s.study_name}: {s.banner()}" for s in snaps if s.banner()]
    lines += [f"> Not like for like: {d}." for d in setup_differences(snaps)]
    return "\n".join(lines) + "\n"


def setup_differences(snaps: list[Snapshot]) -> list[str]:
    """What differs between the two studies' setups besides the search: the rest of the
    budget, the model, the data (the tokens per trial and the trial counts are made equal by
    `reports.sections.verdict.equal_budgets`).

    Fronts trained on different proxies are not comparable point for point.
    """
    specs = [s.study_user_attrs.get(records.SPEC) or {} for s in snaps]
    out = []
    for section in ("budget", "model", "data"):
        a, b = (sp.get(section) for sp in specs)
        if a is not None and b is not None and a != b:
            out.append(f"[{section}] differs: {snaps[0].study_name} {a} vs "
                       f"{snaps[1].study_name} {b}")
    return out


def _figure(snaps: list[Snapshot]) -> go.Figure:
    fig = go.Figure()
    o = snaps[0].objectives
    for s, color in zip(snaps, COLORS, strict=True):
        pts, numbers = _front(s)
        if len(pts) == 0:
            continue
        y = pts[:, 1] if len(o) > 1 else pts[:, 0]
        x = pts[:, 0] if len(o) > 1 else numbers
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=s.study_name,
                                 text=[f"#{n}" for n in numbers], marker={"color": color}))
    fig.update_layout(template="plotly_white",
                      xaxis_title=labels.axis_title(o[0].name, snaps[0].frame)
                      if len(o) > 1 else "trial number",
                      yaxis_title=labels.axis_title(o[1 if len(o) > 1 else 0].name,
                                                    snaps[0].frame))
    return fig


def _html(snaps: list[Snapshot], text: str) -> str:
    body = _figure(snaps).to_html(full_html=False, include_plotlyjs=False,
                                  config={"displaylogo": False})
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<title>moetune compare</title>"
            f"<script type='text/javascript'>{plotly.offline.get_plotlyjs()}</script></head>"
            f"<body style='font-family: sans-serif'><pre>{html_lib.escape(text)}</pre>{body}"
            f"</body></html>\n")


def _png(snaps: list[Snapshot], path: Path) -> None:
    o = snaps[0].objectives
    fig = Figure(figsize=(6.5, 4.2))
    ax = fig.subplots()
    for s, color in zip(snaps, COLORS, strict=True):
        pts, numbers = _front(s)
        if len(pts):
            x = pts[:, 0] if len(o) > 1 else numbers
            ax.plot(x, pts[:, 1] if len(o) > 1 else pts[:, 0], "D-", c=color, label=s.study_name)
    ax.set_xlabel(labels.axis_title(o[0].name, snaps[0].frame) if len(o) > 1 else "trial")
    ax.set_ylabel(labels.axis_title(o[1 if len(o) > 1 else 0].name, snaps[0].frame))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.savefig(path, dpi=110, bbox_inches="tight")
