"""The lr law in tokens and batch against Step Law's released sweeps, held out three ways.

Step Law (arXiv:2503.04715) released its sweeps (github.com/step-law/steplaw at
32a8f4cc50247695fb56cc6c9117abdf67c97763): ``data/dense_lr_bs_loss.csv`` (1,911 runs, columns
N, D, bs in sequences of 2,048 tokens, lr, loss, smooth loss) and ``data/moe_lr_bs_loss.csv``
(708 runs of 4 MoE shapes; N there is the total parameters, 2.15B for every shape, and ``Na``
the active ones). They are read as they are, through the same code as ``moetune law fit``
(`reports.laws.run_table.read_runs`, `table_cells`), and fitted with
`tuner.modeling.laws.lr_batch_law.fit_lr_batch_law`. The model size is ``--params``: by
default ``Na`` (active) where the table has it, else ``N``. For the MoE sweep the total cannot
be it: two of its shapes (1 of 89 and 2 of 88 experts) have the same total to the parameter,
so their runs would fall into one cell with two architectures (the table check refuses that),
and the total is constant while lr* moves with the shape; the active count is what each
token's update passes through.

Held-out designs (each fits on the cells it keeps and predicts the others; a cell is scored
against its own measured optimum, the quadratic in log lr):

- ``largest D``: per model size, its largest D left out (every other cell fitted, every N);
- ``one N``: each model size left out whole, predicted from the others;
- ``compute``: the cells below a compute C = 6·N·D fitted, those up to a decade past it
  predicted, for cuts every 0.25 decades from a decade above the smallest C.

The error is max(pred/meas, meas/pred); the band covers when the measured optimum lies inside
the law's 95% band. A held-out cell whose best run sat on the searched lr range's edge gives a
bound, not a value: it is scored apart (covered when the band reaches past the bound on its
side; its miss is how far the prediction lies on the wrong side of the bound, 1 when it does
not). A model size whose largest D has no cell with an optimum is reported, not scored.

Beside it, for ``largest D``, the design shipped before (one batch, a power law in D, applied
at every batch): per N, a line in log D through that N's cells at one fixed batch (the
smallest batch every one of its D searched, and, as a range, each other such batch),
predicting the left-out D at all of its batches with that one value; its band is
`fit_power_law`'s.

    python benchmarks/bench_law.py table /tmp/steplaw_dense.csv
    python benchmarks/bench_law.py table /tmp/steplaw_dense.csv --loss "smooth loss"
    python benchmarks/bench_law.py table /tmp/steplaw_moe.csv
    python benchmarks/bench_law.py table /tmp/steplaw_moe.csv --params N   # refused: see above
    python benchmarks/bench_law.py table /tmp/steplaw_moe.csv --shape log-linear

``--shape`` is lr*'s form in every fit: ``auto`` (the default, as `moetune law fit`) lets each
fit keep the form with the smaller AICc, ``log-linear`` or ``noise-scale`` forces one; each
design also prints its coverage over every scored cell, bounds included, and how many of its
predictions came from each form.

It prints its figures; benchmarks/RESULTS.md's "lr law in tokens and batch" section quotes them.
"""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tuner.modeling.laws.lr_batch_law import Cell

TARGETS = {"median": 1.25, "p90": 1.8, "coverage": 0.90}  # issue 39's, on the dense sweep
MOE_MEDIAN = 1.2  # issue 54's median target on the MoE sweep (coverage as above)
CUT_STEP = 0.25  # decades of compute between two cuts of the ``compute`` design


def held_out(cells: list[Cell], largest: dict[float, float], shape: str = "auto"
             ) -> dict[str, Any]:
    """Every model size's largest D in the table (``largest``: N -> D) left out in turn: the
    law's and the baseline's misses."""
    from tuner.modeling.laws.lr_batch_law import fit_lr_batch_law

    law_rows: list[dict[str, Any]] = []
    base_rows: dict[float, list[float]] = {}
    notes = []
    for n, d_max in sorted(largest.items()):
        test = [c for c in cells if c.params == n and c.tokens == d_max]
        fit = [c for c in cells if not (c.params == n and c.tokens == d_max)]
        if not [c for c in test if not c.censored]:
            notes.append(f"N {n:.4g}: its largest D ({d_max:.4g}) has no cell with an optimum "
                         "(too few runs per cell)")
            continue
        law_rows += predict(fit_lr_batch_law(fit, shape=shape), test)
        uncensored = [c for c in test if not c.censored]
        for b, miss in _baseline(cells, n, d_max, uncensored).items():
            base_rows.setdefault(b, []).extend(miss)
    return {"law": law_rows, "baseline": base_rows, "notes": notes}


def one_n_out(cells: list[Cell], shape: str = "auto") -> list[dict[str, Any]]:
    """Each model size left out whole and predicted from the others."""
    from tuner.modeling.laws.lr_batch_law import fit_lr_batch_law

    rows: list[dict[str, Any]] = []
    for n in sorted({c.params for c in cells}):
        rows += predict(fit_lr_batch_law([c for c in cells if c.params != n], shape=shape),
                        [c for c in cells if c.params == n])
    return rows


def compute_cuts(cells: list[Cell], shape: str = "auto") -> list[dict[str, Any]]:
    """The cells at C = 6·N·D up to a cut fitted, those up to a decade past it predicted, for
    cuts every `CUT_STEP` decades from a decade above the smallest C (a cut too low for a
    law is skipped)."""
    from tuner.modeling.laws.lr_batch_law import LawFitError, fit_lr_batch_law

    def log_c(c: Cell) -> float:
        return math.log10(6 * c.params * c.tokens)

    rows: list[dict[str, Any]] = []
    lows = [log_c(c) for c in cells]
    for cut in np.arange(min(lows) + 1.0, max(lows), CUT_STEP):
        test = [c for c in cells if cut < log_c(c) <= cut + 1.0]
        try:
            law = fit_lr_batch_law([c for c in cells if log_c(c) <= cut], shape=shape)
        except LawFitError:
            continue
        rows += [r | {"cut": float(cut)} for r in predict(law, test)]
    return rows


def predict(law: Any, test: list[Cell]) -> list[dict[str, Any]]:
    """The law at each held-out cell: a cell with an optimum scored against it, a censored
    one with a bound against that bound (module docstring); a censored cell without one is
    not scored."""
    rows = []
    for c in test:
        if c.censored and not c.bound:
            continue
        lo, hi = law.band(c.tokens, c.batch, c.params)
        pred = law.at(c.tokens, c.batch, c.params)
        if not c.censored:
            inside, miss = lo <= c.lr <= hi, _ratio(pred, c.lr)
        elif c.bound == "upper":  # lr* at or below c.lr
            inside, miss = lo <= c.lr, max(1.0, pred / c.lr)
        else:
            inside, miss = hi >= c.lr, max(1.0, c.lr / pred)
        rows.append({"N": c.params, "D": c.tokens, "B": c.batch, "measured": c.lr,
                     "predicted": pred, "inside": inside, "band_x": math.sqrt(hi / lo),
                     "miss": miss, "bound": c.bound if c.censored else "",
                     "decades_d": law.decades_past(c.tokens, c.batch)["tokens"],
                     "shape": getattr(law, "shape", "")})
    return rows


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
    p.add_argument("csv", help="Step Law's data/dense_lr_bs_loss.csv or data/moe_lr_bs_loss.csv")
    p.add_argument("--loss", default="loss", help="the loss column (loss or 'smooth loss')")
    p.add_argument("--params", default="auto",
                   help="the model-size column: Na (active) where the table has it, else N")
    p.add_argument("--shape", default="auto", choices=("auto", "log-linear", "noise-scale"),
                   help="lr*'s form in every fit: chosen per fit by AICc (auto), or that one")


def run(args: argparse.Namespace) -> int:
    from reports.laws.run_table import RunTableError, read_runs, table_cells

    cols = _header(args.csv)
    n_col = args.params if args.params != "auto" else ("Na" if "Na" in cols else "N")
    # the other loss and the MoE table's timings change from run to run within a cell
    vary = [c for c in ("loss", "smooth loss", "average_iter_time", "total_time")
            if c in cols and c != args.loss]
    try:
        table = read_runs(args.csv, columns={"N": n_col, "B": "bs", "loss": args.loss},
                          batch_unit=2048, vary=vary)
    except RunTableError as e:
        print(f"table: {e}")
        return 2
    tc = table_cells(table)
    cells = list(tc.cells)
    moe = n_col == "Na"
    print(f"cells {len(cells)} (censored {sum(c.censored for c in cells)}, of them with a "
          f"bound {sum(bool(c.bound) for c in cells if c.censored)}), skipped "
          f"{len(tc.skipped)}; loss column {args.loss!r}; N column {n_col!r}; form "
          f"{args.shape}")
    print(f"targets: median <= {MOE_MEDIAN if moe else TARGETS['median']}x, coverage >= "
          f"{TARGETS['coverage']:.0%} (issue 54; issue 39 also asked p90 <= {TARGETS['p90']}x)")
    largest = table.runs.groupby("N")["D"].max().to_dict()
    res = held_out(cells, {float(n): float(d) for n, d in largest.items()}, args.shape)
    for note in res["notes"]:
        print("not scored:", note)
    for name, rows in (("largest D", res["law"]), ("one N", one_n_out(cells, args.shape)),
                       ("compute", compute_cuts(cells, args.shape))):
        _print_design(name, rows)
    _print_baseline(res["baseline"])
    for r in res["law"]:
        print(f"  N {r['N']:.3g} D {r['D']:.3g} B {r['B']:>9.4g}: measured "
              f"{'<= ' if r['bound'] == 'upper' else '>= ' if r['bound'] else ''}"
              f"{r['measured']:.3g} predicted {r['predicted']:.3g} ({r['miss']:.2f}x) band "
              f"x/{r['band_x']:.2f} {'in' if r['inside'] else 'OUT'}")
    return 0


def _header(path: str) -> list[str]:
    import pandas as pd

    return [str(c) for c in pd.read_csv(path, nrows=0).columns]


def _print_design(name: str, rows: list[dict[str, Any]]) -> None:
    """One line for the cells with an optimum, one for the censored ones scored as bounds."""
    for label, part in (("", [r for r in rows if not r["bound"]]),
                        (" bounds", [r for r in rows if r["bound"]])):
        if not part:
            continue
        s = summary([r["miss"] for r in part])
        print(f"law lr*(D, B), {name}{label}: n {s['n']}  median {s['median']:.2f}x  p90 "
              f"{s['p90']:.2f}x  worst {s['worst']:.2f}x  band coverage "
              f"{np.mean([r['inside'] for r in part]):.0%}  median band "
              f"x/{np.median([r['band_x'] for r in part]):.2f}")
    if rows:
        print(f"  {name}: every scored cell with its bound, band coverage "
              f"{np.mean([r['inside'] for r in rows]):.0%} of {len(rows)}; lr*'s form in the "
              f"fits that predicted them: " + ", ".join(
                  f"{f} {sum(r['shape'] == f for r in rows)}" for f in sorted(
                      {r['shape'] for r in rows})) + " (cells)")


def _print_baseline(base: dict[float, list[float]]) -> None:
    if not base:
        return
    first = min(base)
    b0 = summary(base[first])
    print(f"one-batch power law at B {first:.4g} (smallest common): n {b0['n']}  median "
          f"{b0['median']:.2f}x  p90 {b0['p90']:.2f}x  worst {b0['worst']:.2f}x")
    every = summary([m for ms in base.values() for m in ms])
    print(f"one-batch power law, every fixed batch pooled: n {every['n']}  median "
          f"{every['median']:.2f}x  p90 {every['p90']:.2f}x  worst {every['worst']:.2f}x")
    for b, ms in sorted(base.items()):
        v = summary(ms)
        print(f"  fixed B {b:>9.4g}: n {v['n']:>2}  median {v['median']:.2f}x  "
              f"p90 {v['p90']:.2f}x  worst {v['worst']:.2f}x")
