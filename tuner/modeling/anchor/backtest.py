"""The prior backtested over the whole recipe table: each recipe predicted by the prior fitted
without it, its family's other runs read as a team reads its own (`--recipes`: they place the
lab, moving the prior by their shrunk mean miss), and, separately, without its whole family (a
new lab: every DeepSeek row out when predicting DeepSeek-V3, so that DeepSeek's law never
predicts its own runs). The form is chosen afresh in
every fit, as the prior chooses it (`tuner.modeling.anchor.prior.fit_prior`), so the figures
are those of the whole procedure, not of a form picked after seeing every row.

    >>> rows = table_backtest(load_recipes())         # doctest: +SKIP
    >>> print(backtest_markdown(rows))                # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from tuner.modeling.anchor.prior import RunPoint, family_of, fit_prior
from tuner.modeling.anchor.recipe_table import PublishedRun, load_recipes

# what is left out of the fit that predicts a row: the recipe alone (its family's other runs
# stay, read as a team's own runs are: they place the lab), or its whole family (a new lab)
MODES = ("recipe_out", "family_out")


def table_backtest(table: Sequence[PublishedRun]) -> list[dict[str, Any]]:
    """One row per recipe the prior may read (`PublishedRun.in_prior`): for each mode, the
    prediction, its 95% band, the ratio predicted / published and whether the band covers."""
    rows = [r for r in table if r.in_prior]
    out = []
    for run in rows:
        row: dict[str, Any] = {"recipe": run.name, "family": family_of(run), "kind": run.kind,
                               "published_lr": run.lr, "tokens": run.tokens,
                               "batch_tokens": run.batch_end, "source": run.source}
        for mode in MODES:
            if mode == "recipe_out":
                keep = [dataclasses.replace(r, team=family_of(r) == family_of(run))
                        for r in rows if r.name != run.name]
            else:
                keep = [r for r in rows if family_of(r) != family_of(run)]
            got = fit_prior(keep).read_lr(RunPoint.of(run))
            row[mode] = {"lr": got.value, "band": list(got.band), "form": got.form,
                         "ratio": got.value / run.lr, "width": got.band[1] / got.band[0],
                         "covered": got.band[0] <= run.lr <= got.band[1]}
        out.append(row)
    return out


@functools.lru_cache(maxsize=1)
def shipped_backtest() -> tuple[dict[str, Any], ...]:
    """`table_backtest` of the shipped table, once per process (law.md reads it)."""
    return tuple(table_backtest(load_recipes()))


def summary(rows: Sequence[dict[str, Any]], mode: str) -> dict[str, float]:
    """Median and 90th-percentile miss (a factor >= 1), coverage, median and largest band."""
    miss = [max(r[mode]["ratio"], 1 / r[mode]["ratio"]) for r in rows]
    width = [r[mode]["width"] for r in rows]
    return {"n": len(rows), "median_miss": float(np.median(miss)),
            "p90_miss": float(np.percentile(miss, 90)),
            "coverage": float(np.mean([r[mode]["covered"] for r in rows])),
            "median_width": float(np.median(width)), "max_width": float(max(width))}


def _x(ratio: float) -> str:
    return f"{ratio:.2f}x" if ratio >= 1 else f"1/{1 / ratio:.2f}x"


def backtest_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """The rows and both summaries as markdown (law.md, ``moetune law backtest``)."""
    out = ["| recipe | published lr | one recipe out: lr [95%] | ratio | in | "
           "its family out: lr [95%] | ratio | in |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = []
        for mode in MODES:
            m = r[mode]
            cells.append(f"{m['lr']:.3g} [{m['band'][0]:.3g}, {m['band'][1]:.3g}] | "
                         f"{_x(m['ratio'])} | {'yes' if m['covered'] else '**no**'}")
        out.append(f"| {r['recipe']} ({r['family']}) | {r['published_lr']:.3g} | "
                   + " | ".join(cells) + " |")
    out.append("")
    for mode, what in (("recipe_out", "one recipe out (its family's other runs place its lab)"),
                       ("family_out", "its whole family out (a new lab)")):
        s = summary(rows, mode)
        out.append(f"- {what}: median miss {s['median_miss']:.2f}x, 90th percentile "
                   f"{s['p90_miss']:.2f}x, {s['coverage']:.0%} of {s['n']} recipes inside their "
                   f"95% band, band median {s['median_width']:.2f}x wide (largest "
                   f"{s['max_width']:.2f}x).")
    return "\n".join(out)
