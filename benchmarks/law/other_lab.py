"""Another lab's law read at the published recipes: Step Law's sweeps, fitted as a team fits its
own runs, standing in for a team's law at each AdamW recipe of the table.

A team's law is its own setup (data, shape, recipe) measured at proxy scale; only its reach to
the full run is uncertain, and the anchored answer weighs it by its band there
(`tuner.modeling.anchor.answer`). A law fitted on another lab's runs (Step Law's public sweeps,
arXiv:2503.04715, github.com/step-law/steplaw at 32a8f4cc, through `moetune law fit`'s code)
is not: it carries that lab's setup as well. This mode measures what following such a law
costs, against each recipe's published LR (what its lab chose, not a measured optimum) and the
prior fitted without the recipe's family (a new lab: no row of its own places it):

- the law alone: its lr*(N, D, B) at the recipe's active parameters, tokens and final batch,
  its 95% band, how far past its cells (decades in D, B and N);
- the anchored answer with that law, as `moetune export --law law.json` gives it;
- the same with the law's reading carrying the table's between-lab scatter (the new-lab
  scatter beyond the within-lab one, in quadrature), as a reading of another setup should.

Where the law and the prior disagree beyond their bands, the answer is the narrower's value: the
prior's with its own band, or the law's with its band reaching the prior's value; each summary
also counts what the narrower's own band there (the rule before) held.

Modeled: fits and readings only, no training.

    python benchmarks/bench_law.py other-lab /tmp/steplaw_dense.csv /tmp/steplaw_moe.csv
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
from typing import Any

from benchmarks.results_md import publish

HEADING = "## Another lab's law read at the published recipes (Step Law's sweeps as a team's law)"
Z95 = 1.959964


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dense", help="Step Law's data/dense_lr_bs_loss.csv")
    p.add_argument("moe", help="Step Law's data/moe_lr_bs_loss.csv")


def _fit(csv: str) -> Any:
    """lr*(N, D, B) of a Step Law sweep, as `benchmarks.law.table` reads it (N: active)."""
    import pandas as pd

    from reports.laws.run_table import read_runs, table_cells
    from tuner.modeling.laws.lr_batch_law import fit_lr_batch_law

    cols = list(pd.read_csv(csv, nrows=0).columns)
    vary = [c for c in ("smooth loss", "average_iter_time", "total_time") if c in cols]
    table = read_runs(csv, columns={"N": "Na" if "Na" in cols else "N", "B": "bs",
                                    "loss": "loss"}, batch_unit=2048, vary=vary)
    return fit_lr_batch_law(list(table_cells(table).cells))


def _with_sd(at: Any, extra: float) -> Any:
    """``at`` with ``extra`` decades of sd added to its band in quadrature."""
    lo, hi = at.band
    sd = math.hypot(math.log10(hi / lo) / (2 * Z95), extra)
    mu = math.log10(at.lr)
    return dataclasses.replace(at, band=(10 ** (mu - Z95 * sd), 10 ** (mu + Z95 * sd)))


def rows_for(law: Any) -> list[dict[str, Any]]:
    """One row per AdamW recipe: the law alone, the prior (family out), the answer with the
    law as read, and with the law carrying the between-lab scatter."""
    from tuner.export.answers import TableLaw
    from tuner.modeling.anchor.answer import answer_lr
    from tuner.modeling.anchor.backtest import family_of
    from tuner.modeling.anchor.prior import RunPoint, fit_prior
    from tuner.modeling.anchor.recipe_table import load_recipes
    from tuner.modeling.laws.lr_at_batch import lr_at_batch

    table = [r for r in load_recipes() if r.in_prior]
    named = TableLaw(law=law, name="Step Law's sweep")
    lo_n, hi_n = law.params_range
    out = []
    for run in table:
        prior = fit_prior([r for r in table if family_of(r) != family_of(run)])
        between = math.sqrt(max(0.0, prior.lr.scatter**2 - prior.lr.within**2))
        point = RunPoint.of(run)
        at = lr_at_batch(named, tokens=run.tokens, batch=run.batch_end, flops_per_token=0.0,
                         params=run.n_active)
        p = prior.read_lr(point)
        row: dict[str, Any] = {"recipe": run.name, "published": run.lr,
                               "past": (at.decades_tokens, at.decades_batch,
                                        max(0.0, math.log10(run.n_active / hi_n),
                                            math.log10(lo_n / run.n_active)))}
        for key, lr, band in (("law", at.lr, at.band), ("prior", p.value, p.band)):
            row[key] = {"ratio": lr / run.lr, "width": band[1] / band[0],
                        "in": band[0] <= run.lr <= band[1]}
        for key, reading in (("answer", at), ("answer_between", _with_sd(at, between))):
            a = answer_lr(point, prior=prior, law=reading)
            # where the two disagree, the band before it reached the other's value: the
            # narrower's own
            own = (reading.band if a.law_weight == 1 else p.band) if a.disagree else a.band
            row[key] = {"ratio": a.lr / run.lr, "width": a.width, "weight": a.law_weight,
                        "in": a.band[0] <= run.lr <= a.band[1], "disagree": bool(a.disagree),
                        "in_own": own[0] <= run.lr <= own[1],
                        "own_width": own[1] / own[0]}
        out.append(row)
    return out


def _summary(rows: list[dict[str, Any]], key: str) -> str:
    miss = [max(r[key]["ratio"], 1 / r[key]["ratio"]) for r in rows]
    width = [r[key]["width"] for r in rows]
    inside = sum(r[key]["in"] for r in rows)
    said = (f"{inside}/{len(rows)} inside their 95% band, median miss "
            f"{statistics.median(miss):.2f}x, band median {statistics.median(width):.2f}x")
    if "weight" in rows[0][key]:
        own = sum(r[key]["in_own"] for r in rows)
        own_width = statistics.median(r[key]["own_width"] for r in rows)
        said += (f", the law's median weight "
                 f"{statistics.median(r[key]['weight'] for r in rows):.0%}; "
                 f"{sum(r[key]['disagree'] for r in rows)} disagreements, "
                 f"{sum(r[key]['disagree'] and r[key]['weight'] == 1 for r in rows)} of them "
                 f"the law's (its band reaching the prior's value): with the law's own band "
                 f"there instead (the rule before) {own}/{len(rows)} inside, band median "
                 f"{own_width:.2f}x")
    return said


def _lines(name: str, law: Any, rows: list[dict[str, Any]]) -> list[str]:
    fmt = lambda d: f"{d['ratio']:.2f}x, {d['width']:.1f}x{'' if d['in'] else ' **out**'}"  # noqa: E731
    lines = [f"### {name}", "",
             f"lr*'s form: {law.shape}; {law.n_cells} cells; N {law.params_range[0]:.3g}-"
             f"{law.params_range[1]:.3g} active.", "",
             "| recipe | published lr | decades past the cells (D, B, N) | the law alone: ratio, "
             "band | prior, family out | anchored with the law | with the between-lab scatter |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        d = r["past"]
        lines.append(f"| {r['recipe']} | {r['published']:.3g} | {d[0]:.1f}, {d[1]:.1f}, "
                     f"{d[2]:.1f} | {fmt(r['law'])} | {fmt(r['prior'])} | "
                     f"{fmt(r['answer'])}, weight {r['answer']['weight']:.0%} | "
                     f"{fmt(r['answer_between'])}, weight {r['answer_between']['weight']:.0%} |")
    lines += ["", f"- the law alone: {_summary(rows, 'law')};",
              f"- the prior alone (family out): {_summary(rows, 'prior')};",
              f"- anchored with the law as read: {_summary(rows, 'answer')};",
              f"- anchored with the law carrying the between-lab scatter: "
              f"{_summary(rows, 'answer_between')}."]
    return lines


def run(args: argparse.Namespace) -> int:
    lines = ["Command: `python benchmarks/bench_law.py other-lab /tmp/steplaw_dense.csv "
             "/tmp/steplaw_moe.csv` (`benchmarks/law/other_lab.py`; the CSVs are Step Law's "
             "data/ folder at 32a8f4cc). Modeled: fits and readings, no training; the truth "
             "each row is held against is the LR its lab published, not a measured optimum. "
             "Ratio: predicted / published; band: its 95% width; **out**: the published LR "
             "outside it.", ""]
    for name, csv in (("Step Law's dense sweep", args.dense), ("Step Law's MoE sweep",
                                                               args.moe)):
        law = _fit(csv)
        lines += _lines(name, law, rows_for(law)) + [""]
    lines += ["Reading: where the law is narrow a decade or two out (the dense sweep), it sits "
              "above what most labs chose and its own band does not reach them, so followed with "
              "that band the answer missed most published LRs; its band reaching the prior's "
              "value holds most of them, at a wider band. That gap is another lab's setup as "
              "much as the reach: a team's law of its own setup carries only the reach, and no "
              "published optimum measures which part is which. Where the law is wide that far "
              "out (the MoE sweep), it weighs little and the answer stays with the prior."]
    publish(HEADING, lines)
    return 0
