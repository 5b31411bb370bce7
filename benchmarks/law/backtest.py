"""The export's backtest (`tuner.export.backtest`) on the shipped law design's real fits: each
seed's lr law, as benchmarks/law_batch.json stores it (entry ``b2-t24``:
``search_spaces/law.toml``, 24 trials per budget, the batch fixed at 2 sequences of 128 = 256
tokens per step, µP on the ``debug`` proxy, base width 64), asked for its LR at each DeepSeek
run's published tokens and final batch, beside the published LR.

The JSON stores each law's coefficients, not its bootstrap replicates, so the band is not
reproduced here (the export computes it from the study itself). A law fitted at one batch
refuses its LR at every published batch; the table shows its LR where it was measured (the
fitted batch), for the hidden matrices (lr / width_mult), against the published single LR.

    python benchmarks/bench_law.py backtest
    python benchmarks/bench_law.py backtest --table DIR/law.json   # a law of `moetune law fit`

With ``--table``, the law fitted from a table of runs (Step Law's released sweep, say: its
command in RESULTS.md, "lr law in tokens and batch") is asked the same question at each
target's N (active non-embedding parameters), D and B, in standard parametrization (one LR for
every parameter, as the table's runs trained), into its own section.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.law.common import BENCH
from benchmarks.results_md import publish
from trainers.presets import preset

if TYPE_CHECKING:
    from tuner.modeling.laws.power_law import StudyLaw


def seed_law(name: str, fit: dict) -> StudyLaw:
    from tuner.modeling.laws.power_law import PowerLaw, StudyLaw

    lr = fit["lr_law"]
    law = PowerLaw(coef=lr["coef"], exponent=lr["exponent"],
                   exponent_interval=tuple(lr["exponent_interval"]), x_min=lr["x_min"],
                   x_max=lr["x_max"], replicates=((math.log10(lr["coef"]), lr["exponent"]),))
    return StudyLaw(name=name, variable=fit["variable"], lr=law)


HEADING = "## Backtest against DeepSeek's published recipes"
TABLE_HEADING = "## Backtest of a table's law against DeepSeek's published recipes"


def table_backtest(path: Path) -> None:
    """The ``--table`` section (module docstring)."""
    from tuner.export.backtest import backtest, backtest_table
    from tuner.modeling.laws.lr_batch_law import LrBatchLaw

    law = LrBatchLaw.from_dict(json.loads(path.read_text())["lr_batch_law"])
    rows = backtest(law, proxy=preset("debug"))  # no µP: the one LR, as the table's runs
    lines = [f"Command: `moetune law fit STEPLAW.csv --column B=bs --batch-unit 2048 --vary "
             f"'smooth loss' --out {path.parent}`, then `python benchmarks/bench_law.py "
             f"backtest --table {path}` (the law of "
             f"`moetune law fit` on Step Law's dense sweep, as in \"lr law in tokens and "
             f"batch\": {law.n_cells} cells, N {law.params_range[0]:.3g}-"
             f"{law.params_range[1]:.3g}, D {law.tokens_range[0]:.3g}-"
             f"{law.tokens_range[1]:.3g}, B {law.batch_range[0]:.3g}-"
             f"{law.batch_range[1]:.3g} tokens per step), through `tuner.export.backtest`, the "
             "export's own hook; N is each target's active non-embedding parameters. Modeled: a "
             "law's extrapolation, no training. (The column says hidden matrices; without "
             "µP they and every other parameter get this one LR.)", "", backtest_table(rows),
             "", "- **Read.** Every band covers the published LR, and every band is thousands "
             "of times wide: 1.8-2.2 decades past the sweep's largest D and 0.7-1.2 past its "
             "largest batch, the D×B term that fits the sweep (each batch its own "
             "D-exponent) is extrapolated along both axes at once, and the point estimate "
             "lands 67-170x above the published LRs. The export of such a law warns that it "
             "does not pin the LR (band wider than 4x); on this evidence a law in D and B "
             "fitted below 0.1T tokens does not place a 10T-token run's LR. Target (within 2x "
             "of the published LR): not met."]
    publish(TABLE_HEADING, lines)
    print("\n".join(lines))


def shipped_backtest() -> None:
    """The default section (module docstring)."""
    from tuner.export.backtest import backtest, backtest_table
    from tuner.modeling.laws.lr_at_batch import LawBatches

    entry = json.loads((BENCH / "law_batch.json").read_text())["b2-t24"]
    proxy = dataclasses.replace(preset("debug"), mup_base_dim=preset("debug").dim)
    batches = LawBatches.of([float(b * 128) for b in entry["batches"]])
    lines = [f"Command: `python benchmarks/bench_law.py backtest` (`tuner.export.backtest`, the "
             f"export's own hook, on each seed's lr law as benchmarks/law_batch.json stores it: "
             f"`search_spaces/law.toml` at 24 trials per budget, measured 2026-12-03, the batch "
             f"fixed at {batches.fixed:.0f} tokens per step, µP at base width {proxy.dim}). "
             "Modeled: a law's extrapolation, no training. The band is the export's, computed "
             "from the study's bootstrap replicates, which the JSON does not keep; these rows "
             "are refused anyway."]
    for seed, fit in sorted(entry["seeds"].items()):
        law = fit["lr_law"]
        lines += ["", f"Seed {seed} ({fit['name']}): lr*(D) = {law['coef']:.4g} * "
                      f"D^{law['exponent']:.4f}.", "",
                  backtest_table(backtest(seed_law(fit["name"], fit), proxy=proxy,
                                          batches=batches))]
    lines += ["", "- **Refused, 9 of 9.** The shipped design never varies the batch, so its LR "
              "carries to none of the published batches (4.9-5.4 decades above the fitted 256 "
              "tokens per step): the export exits 2 and names what to run, as it does for these "
              "studies. Target (the study's LR within 2x of the published one at all three "
              "DeepSeek targets): not met; nothing to compare until the law is fitted in D and B.",
              "- **Where it was measured.** Taken at the fitted batch, as the export wrote it "
              "before and `--lr-at-fitted-batch` writes it now (labelled), the hidden matrices' "
              "LR (lr / width_mult: 32, 80, 112) is 1/400 to 1/1,700 of the published single "
              "LR; the base LR alone is 1/9 to 1/21 of it. Like with like, the gap is the "
              "hidden matrices': about three decades, which no band of a one-batch law covers."]
    publish(HEADING, lines)



def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--table", type=Path, metavar="LAW_JSON",
                   help="a law of `moetune law fit` (its law.json), into its own section")


def run(a: argparse.Namespace) -> int:
    if a.table:
        table_backtest(a.table)
    else:
        shipped_backtest()
    return 0
