"""PNG versions of the main plots, for a terminal user or a markdown viewer (matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

# A Figure of its own (no pyplot): no global backend or figure registry is touched.
from matplotlib.figure import Figure

from reports import series
from reports.analysis.importance import LEVEL, Importances
from reports.analysis.progress import Progress
from reports.analysis.snapshot import Snapshot
from reports.sections import labels

DPI = 110


class _Maker(Protocol):
    """Makes one plot from what it needs of these, or None when there is nothing to plot."""

    def __call__(self, *, snapshot: Snapshot, importances: Importances,
                 prog: Progress) -> Figure | None: ...


def write_pngs(snapshot: Snapshot, out_dir: Path, *, importances: Importances,
               prog: Progress) -> dict[str, Path]:
    """Write pareto.png, progress.png, importance.png, curves.png where there is data."""
    makers: dict[str, tuple[str, _Maker]] = {
        "pareto_png": ("pareto.png", _pareto), "progress_png": ("progress.png", _progress),
        "importance_png": ("importance.png", _importance), "curves_png": ("curves.png", _curves)}
    out = {}
    for key, (name, maker) in makers.items():
        fig = maker(snapshot=snapshot, importances=importances, prog=prog)
        if fig is None:
            continue
        path = out_dir / name
        fig.savefig(path, dpi=DPI, bbox_inches="tight")
        out[key] = path
    return out


def _pareto(*, snapshot: Snapshot, **_: object) -> Figure | None:
    pairs = series.objective_pairs(snapshot)
    df = series.with_values(snapshot)
    if not pairs or df.empty:
        return None
    fig = Figure(figsize=(5.5 * len(pairs), 4.2))
    axes = fig.subplots(1, len(pairs), squeeze=False)
    for ax, (i, j) in zip(axes[0], pairs, strict=True):
        oi, oj = snapshot.objectives[i], snapshot.objectives[j]
        feas = df["feasible"].astype(bool)
        front = (df["pareto_rank"] == 1).fillna(False).astype(bool)
        ax.scatter(df.loc[~feas, oi.column], df.loc[~feas, oj.column], marker="x", c="#999999",
                   label="infeasible")
        ax.scatter(df.loc[feas & ~front, oi.column], df.loc[feas & ~front, oj.column],
                   c="#1f77b4", label="feasible")
        f = df[front].sort_values(oi.column)
        ax.plot(f[oi.column], f[oj.column], "D-" if len(snapshot.objectives) == 2 else "D",
                c="#d62728", label="Pareto set")
        for _label, r in f.iterrows():
            ax.annotate(f"#{r['number']}", (r[oi.column], r[oj.column]), fontsize=8,
                        xytext=(4, 4), textcoords="offset points")
        knee = df[df["knee"].astype(bool)]
        if len(snapshot.objectives) > 1 and not knee.empty:
            ax.scatter(knee[oi.column], knee[oj.column], s=180, facecolors="none",
                       edgecolors="black", linewidths=1.5, label="knee (export --pick knee)")
        ax.set_xlabel(labels.axis_title(oi.name, snapshot.frame))
        ax.set_ylabel(labels.axis_title(oj.name, snapshot.frame))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{snapshot.study_name}: {series.front_title(snapshot)}")
    return fig


def _progress(*, snapshot: Snapshot, prog: Progress, **_: object) -> Figure | None:
    if not prog.values:
        return None
    fig = Figure(figsize=(6.5, 3.8))
    ax = fig.subplots()
    ax.step(prog.trial_numbers, prog.values, where="post", c="#d62728")
    ax.set_xlabel("trial number")
    if prog.kind == "best":
        o = snapshot.objectives[0]
        ax.set_ylabel(f"best {labels.axis_title(o.name, snapshot.frame)}")
        ax.set_title("Convergence (best so far)")
    else:
        assert prog.reference is not None, "a hypervolume history has its reference point"
        names = [o.name for o in snapshot.objectives]
        ax.set_ylabel("hypervolume")
        ref = ", ".join(f"{n}={v:.4g}" for n, v in zip(names, prog.reference.values, strict=True))
        ax.set_title(f"Hypervolume, reference point ({ref})", fontsize=9)
    ax.grid(alpha=0.3)
    return fig


def _importance(*, importances: Importances, **_: object) -> Figure | None:
    if not importances.values:
        return None
    params = sorted({p for v in importances.values.values() for p in v})
    n = len(importances.values)
    fig = Figure(figsize=(6.5, 0.9 + 0.45 * len(params) * n))
    ax = fig.subplots()
    height = 0.8 / n
    for k, (obj, vals) in enumerate(importances.values.items()):
        mean = np.array([vals.get(p, 0.0) for p in params])
        bounds = np.array([importances.interval(obj, p) for p in params]).reshape(-1, 2)
        err = np.nan_to_num(np.abs(bounds - mean[:, None]).T)  # (2, params): below, above
        ax.barh([i + k * height for i in range(len(params))], mean, height=height, label=obj,
                xerr=err, capsize=2)
    ax.set_yticks([i + height * (n - 1) / 2 for i in range(len(params))], params)
    ax.set_xlabel(f"importance ({importances.evaluator}, mean of {importances.resamples} "
                  f"bootstrap resamples, {LEVEL:.0%} interval)")
    ax.legend(fontsize=8)
    return fig


def _curves(*, snapshot: Snapshot, **_: object) -> Figure | None:
    curves = series.pareto_curves(snapshot)
    if not curves:
        return None
    fig = Figure(figsize=(6.5, 3.8))
    ax = fig.subplots()
    for c in curves:
        ax.plot(c.tokens, c.val_loss, marker=".", label=c.label)
    ax.set_xlabel("tokens seen")
    ax.set_ylabel(labels.axis_title("val_loss", snapshot.frame))
    ax.set_title("Learning curves of the best trials")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig
