"""``moetune law fit RUNS.csv|.parquet``: the lr law in tokens and batch from runs a team
already has (`reports.laws.run_table`, `reports.laws.law_table`; the law is the registered
form that fits the cells best, `tuner.modeling.laws.forms`, as a law study's is).
``moetune law backtest``: the published recipes' prior the export anchors on, each recipe
predicted without it (`tuner.modeling.anchor.backtest`).

    moetune law fit runs.csv --out law/
    moetune law fit dense_lr_bs_loss.csv --column B=bs --batch-unit 2048 \\
        --vary "smooth loss" --out steplaw/        # Step Law's sweep, as it is

The table is read, checked and fitted before anything is written: a bad table or argument
exits 2 naming the column, the rule and the value, with no folder made.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainers.config.validation import FieldError
from tuner.app.requests.errors import UsageError
from tuner.modeling.anchor.backtest import backtest_markdown, table_backtest
from tuner.modeling.anchor.prior import fit_prior
from tuner.modeling.anchor.recipe_table import load_recipes
from tuner.modeling.laws.forms import read_lr_law
from tuner.modeling.laws.lr_batch_law import MIN_CELLS, WINDOW, LawFitError
from tuner.modeling.laws.response_surface import MIN_TRIALS


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("law", help="laws from runs a team already has")
    sub = p.add_subparsers(dest="law_command", metavar="LAW_COMMAND", required=True)
    f = sub.add_parser(
        "fit", help="fit lr*(D, B) from a table of runs (csv or parquet)",
        description="Fit lr*(D, B) from a table of runs. What the table needs: each (N, D, B) "
        f"cell at least {MIN_TRIALS} runs with a finite loss within {WINDOW:g} decades of lr of "
        f"its best run (the {MIN_TRIALS} nearest when fewer lie there): a quadratic in log lr "
        "has 3 coefficients and the 3 runs more measure the noise that sets the "
        "cell's interval (3 points fit a parabola exactly and say nothing of how far the noise "
        f"moves its bottom, so a 5-lr sweep is not enough); and at least {MIN_CELLS} such cells "
        "(one more with several model sizes) spanning 2 tokens and 2 batches. A cell short of "
        "runs is named in the error with why.")
    f.add_argument("runs", help="RUNS.csv or RUNS.parquet: one row per run (N, D, B, lr, loss)")
    f.add_argument("--out", required=True, help="folder for law.md, law.json, law.png")
    f.add_argument("--column", action="append", default=[], metavar="KEY=NAME",
                   help="the table's column for KEY in N (non-embedding params), D (tokens), "
                        "B (batch per step), lr, loss; default: the KEY itself")
    f.add_argument("--batch-unit", type=float, default=1.0,
                   help="tokens per unit of the B column (2048 for batches in sequences of "
                        "2,048 tokens; default 1: B is in tokens)")
    f.add_argument("--vary", action="append", default=[], metavar="COLUMN",
                   help="a column that may change between the runs of one cell (another "
                        "loss, a seed); others must be constant per cell or name each run")
    f.set_defaults(handler=law_fit)
    b = sub.add_parser(
        "backtest", help="the published recipes' prior, each recipe predicted without it",
        description="Backtest the prior the export anchors the full run's LR on: each recipe "
        "of the table predicted by the prior fitted without it, and without its whole family "
        "(its form chosen afresh each time); the ratio, the 95% band and whether it covers the "
        "published LR, per recipe, then the median miss and the coverage.")
    b.add_argument("--recipes", type=Path, metavar="RECIPES_TOML",
                   help="the team's own past full runs, in the recipe table's form "
                        "(docs/full_run.md), added to the published ones")
    b.set_defaults(handler=law_backtest)


def law_fit(args: argparse.Namespace) -> int:
    from reports.laws.law_table import table_law_data, write_table_law
    from reports.laws.run_table import RunTableError, read_runs
    try:
        table = read_runs(args.runs, columns=_columns(args.column),
                          batch_unit=args.batch_unit, vary=args.vary)
        data = table_law_data(table)
    except (RunTableError, LawFitError) as e:
        raise UsageError(str(e)) from None
    paths = write_table_law(data, Path(args.out))
    print(f"law: {read_lr_law(data['lr_batch_law']).fit_summary()}; wrote "
          f"{', '.join(str(p) for p in paths.values())}", file=sys.stderr)
    return 0


def law_backtest(args: argparse.Namespace) -> int:
    try:
        table = load_recipes(team=args.recipes)
        prior = fit_prior(table)
    except (FieldError, ValueError) as e:
        raise UsageError(f"--recipes: {e}" if args.recipes else str(e)) from None
    print(f"prior: {prior.summary()}")
    for run in prior.left_out:
        print(f"left out: {run.name}: {run.flag}")
    print(backtest_markdown(table_backtest(table)))
    return 0


def _columns(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, name = item.partition("=")
        if not sep or not key or not name:
            raise UsageError(f"--column: must be KEY=NAME (e.g. B=bs), but got {item!r}")
        out[key.strip()] = name
    return out
