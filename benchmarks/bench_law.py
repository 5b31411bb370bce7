"""The law benchmarks, one entry point: ``python benchmarks/bench_law.py MODE [options]``.

    one-batch  a law study at one batch, over seeds: the held-out budget (benchmarks/law.json)
    batch      law.toml's design with the batch fixed or searched (benchmarks/law_batch.json)
    pooled     pooled against per-budget law fits, same trainings (benchmarks/law_pooled.json)
    table      lr*(D, B) on Step Law's released sweep, through `moetune law fit`'s code
    backtest   the study's law asked for DeepSeek's published recipes
    grid       law.toml as shipped, over seeds: held out in budget and batch (law_grid.json)
    beyond     the grid one budget further: its held-out budget fitted, 5x past it predicted
    held-batch the grid's held-out batch at its held-out budget: 320 steps, not 64
    anchored   the published recipes' prior backtested, and the grid's fits combined with it
    other-lab  Step Law's sweeps fitted as a team's law, read at every published recipe

Each mode's module in benchmarks/law/ says what it measures and its exact commands
(``python benchmarks/bench_law.py MODE --help`` prints it); each writes its own section of
benchmarks/RESULTS.md (table prints only).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.law import MODES  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="mode", required=True, metavar="MODE")
    for name, module in MODES.items():
        mod = importlib.import_module(f"benchmarks.law.{module}")
        sp = sub.add_parser(name, help=mod.__doc__.splitlines()[0], description=mod.__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(sp)
        sp.set_defaults(run=mod.run)
    a = p.parse_args(argv)
    return a.run(a)


if __name__ == "__main__":
    sys.exit(main())
