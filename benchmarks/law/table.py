"""The lr law in tokens and batch against Step Law's released sweep: per model size, the
largest D left out and predicted at each of its batches.

Step Law (arXiv:2503.04715) released its dense sweep (github.com/step-law/steplaw at
32a8f4cc50247695fb56cc6c9117abdf67c97763, ``data/dense_lr_bs_loss.csv``: 1,911 runs, columns
N, D, bs in sequences of 2,048 tokens, lr, loss, smooth loss). It is read as it is, through the
same code as ``moetune law fit`` (`reports.laws.run_table.read_runs`, `table_cells`) and fitted
with `tuner.modeling.laws.lr_batch_law.fit_lr_batch_law`. For each model size N: the cells of its
largest D are left out, the law is fitted on every other cell (every N), and lr* is predicted at
each of the left-out cells' batches; the error is max(pred/meas, meas/pred) against the cell's
measured optimum (its quadratic in log lr), and the band covers when the measured optimum lies
inside the law's 95% band. A model size whose largest D has no cell with an optimum (too few runs
per cell) is reported, not scored.

Beside it, the design shipped before (one batch, a power law in D, applied at every batch): per
N, a line in log D through that N's cells at one fixed batch (the smallest batch every one of
its D searched, and, as a range, each other such batch), predicting the left-out D at all of
its batches with that one value; its band is `fit_power_law`'s.

    python benchmarks/bench_law.py table /tmp/steplaw_dense.csv
    python benchmarks/bench_law.py table /tmp/steplaw_dense.csv --loss "smooth loss"

It prints its figures (no RESULTS.md section of its own: the "lr law in tokens and batch"
section quotes them).
"""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tuner.modeling.laws.lr_batch_law import Cell

TARGETS = {"median": 1.25, "p90": 1.8, "coverage": 0.90}


def held_out(cells: list[Cell], largest: dict[float, float]) -> dict[str, Any]:
    """Every model size's largest D in the table (``largest``: N -> D) left out in turn: the
    law's and the baseline's misses."""
    from tuner.modeling.laws.lr_batch_law import fit_lr_batch_law

    law_rows: list[dict[str, Any]] = []
    base_rows: dict[float, list[float]] = {}
    notes = []
    for n, d_max in sorted(largest.items()):
        test = [c for c in cells if c.params == n and c.tokens == d_max and not c.censored]
        fit = [c for c in cells if not (c.params == n and c.tokens == d_max)]
        if not test:
            notes.append(f"N {n:.4g}: its largest D ({d_max:.4g}) has no cell with an optimum "
                         "(too few runs per cell)")
            continue
        law = fit_lr_batch_law(fit)
        for c in test:
            lo, hi = law.band(c.tokens, c.batch, c.params)
            past = law.decades_past(c.tokens, c.batch)
            law_rows.append({"N": n, "D": c.tokens, "B": c.batch, "measured": c.lr,
                             "predicted": law.at(c.tokens, c.batch, c.params),
                             "inside": lo <= c.lr <= hi, "band_x": math.sqrt(hi / lo),
                             "decades_d": past["tokens"]})
        for b, miss in _baseline(cells, n, d_max, test).items():
            base_rows.setdefault(b, []).extend(miss)
    return {"law": law_rows, "baseline": base_rows, "notes": notes}


def _baseline(cells: list[Cell], n: float, d_max: float, test: list[Cell]
              ) -> dict[float, list[float]]:
    """Per fixed batch (searched at every fitted D of this N): a power law in D at that batch,
    its prediction applied at every batch of the left-out D (the misses, as ratios)."""
    from tuner.modeling.laws.power_law import fit_power_law

    own = [c for c in cells if c.params == n and c.tokens != d_max and not c.censored]
    ds = {c.tokens for c in own}
    out = {}
    for b in sorted({c.batch for c in own}):
        pts = [c for c in own if c.batch == b]
        if {c.tokens for c in pts} != ds or len(ds) < 2:
            continue
        rng = np.random.default_rng(0)
        line = fit_power_law([c.tokens for c in pts], [c.lr for c in pts],
                             [10 ** (math.log10(c.lr) + c.se * rng.standard_normal(200))
                              for c in pts])
        out[b] = [_ratio(line.at(d_max), c.lr) for c in test]
    return out


def _ratio(a: float, b: float) -> float:
    return max(a / b, b / a)


def summary(misses: list[float]) -> dict[str, float]:
    e = np.asarray(misses)
    return {"n": len(e), "median": float(np.median(e)), "p90": float(np.percentile(e, 90)),
            "worst": float(e.max())}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("csv", help="Step Law's data/dense_lr_bs_loss.csv")
    p.add_argument("--loss", default="loss", help="the loss column (loss or 'smooth loss')")


def run(args: argparse.Namespace) -> int:
    from reports.laws.run_table import read_runs, table_cells

    other = "smooth loss" if args.loss == "loss" else "loss"
    table = read_runs(args.csv, columns={"B": "bs", "loss": args.loss}, batch_unit=2048,
                      vary=[other])
    tc = table_cells(table)
    largest = table.runs.groupby("N")["D"].max().to_dict()
    res = held_out(list(tc.cells), {float(n): float(d) for n, d in largest.items()})
    rows = res["law"]
    s = summary([_ratio(r["predicted"], r["measured"]) for r in rows])
    cov = float(np.mean([r["inside"] for r in rows]))
    print(f"cells {len(tc.cells)} (censored {sum(c.censored for c in tc.cells)}), "
          f"skipped {len(tc.skipped)}; loss column {args.loss!r}")
    for note in res["notes"]:
        print("not scored:", note)
    print(f"law lr*(D, B): n {s['n']}  median {s['median']:.2f}x  p90 {s['p90']:.2f}x  "
          f"worst {s['worst']:.2f}x  band coverage {cov:.0%}  median band "
          f"x/{np.median([r['band_x'] for r in rows]):.2f}  (targets: median <= "
          f"{TARGETS['median']}x, p90 <= {TARGETS['p90']}x, coverage >= "
          f"{TARGETS['coverage']:.0%})")
    base = res["baseline"]
    first = min(base)
    b0 = summary(base[first])
    print(f"one-batch power law at B {first:.4g} (smallest common): n {b0['n']}  median "
          f"{b0['median']:.2f}x  p90 {b0['p90']:.2f}x  worst {b0['worst']:.2f}x")
    every = summary([m for ms in base.values() for m in ms])
    print(f"one-batch power law, every fixed batch pooled: n {every['n']}  median "
          f"{every['median']:.2f}x  p90 {every['p90']:.2f}x  worst {every['worst']:.2f}x")
    per_b = {b: summary(m) for b, m in sorted(base.items())}
    for b, v in per_b.items():
        print(f"  fixed B {b:>9.4g}: n {v['n']:>2}  median {v['median']:.2f}x  "
              f"p90 {v['p90']:.2f}x  worst {v['worst']:.2f}x")
    for r in rows:
        print(f"  N {r['N']:.3g} D {r['D']:.3g} B {r['B']:>9.4g}: measured {r['measured']:.3g}"
              f" predicted {r['predicted']:.3g} ({_ratio(r['predicted'], r['measured']):.2f}x)"
              f" band x/{r['band_x']:.2f} {'in' if r['inside'] else 'OUT'}")
    return 0
