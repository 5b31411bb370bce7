"""What the importance bootstrap costs a report: `reports.analysis.importance.param_importances`
with its default resample count (`resample_count(n)`, each resample refitting PED-ANOVA once per
objective) against one plain fit on all trials (what the report computed before: the reference).

Synthetic studies without training (val_loss a bowl in lr plus noise, peak memory from
warmup_fraction), two objectives, n feasible trials, three parameters.

    python benchmarks/bench_importance.py           # prints a table; --write adds it to RESULTS.md

Measured on whatever machine runs it; the figures in RESULTS.md say which.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import optuna

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "reports"))  # the report tests' synthetic studies

from results_md import write_section  # noqa: E402 - benchmarks/ is this script's folder
from synthetic_studies import add, new_study  # noqa: E402

import reports  # noqa: E402
from reports.analysis.importance import param_importances, resample_count  # noqa: E402

SIZES = (25, 100, 200, 500, 1000)
REPEATS = 3
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
HEADING = "## Report importances (bootstrap)"


def study(n: int, seed: int = 0) -> optuna.Study:
    rng = random.Random(seed)
    s = new_study(f"bench-{n}")
    for _ in range(n):
        lr, warm = 10 ** rng.uniform(-4, -2), rng.uniform(0, 0.2)
        mem = 1.0 + 10 * warm + rng.gauss(0, 0.05)
        add(s, values=[2.0 + (math.log10(lr) + 3) ** 2 + rng.gauss(0, 0.05), mem],
            memory_gb=mem, constraints={"max_peak_memory_gb": -1.0},
            params={"lr": lr, "warmup_fraction": warm, "precision": rng.choice(["bf16", "fp8"])})
    return s


def median_s(fn) -> float:
    times = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="add the table to RESULTS.md")
    args = parser.parse_args()
    rows = []
    for n in SIZES:
        snap = reports.take_snapshot(study(n))
        # the reference: one copy of the trials and one fit per objective, as before the bootstrap
        ref = median_s(lambda snap=snap: param_importances(snap, resamples=1))
        boot = median_s(lambda snap=snap: param_importances(snap))
        rows.append(f"| {n} | {resample_count(n)} | {ref * 1000:.0f} | {boot:.2f} | "
                    f"{boot / resample_count(n) * 1000:.1f} |")
        print(rows[-1], flush=True)
    load = os.getloadavg()[0]  # other jobs on the machine slow every figure alike
    body = "\n".join([
        f"Measured {dt.date.today()} on {platform.machine()}, {os.cpu_count()} CPU cores (shared "
        f"with other jobs: load average {load:.1f} at the end of the run), Python "
        f"{platform.python_version()}, Optuna {optuna.__version__}. "
        "Command: `python benchmarks/bench_importance.py --write`.", "",
        "Two objectives, three parameters, synthetic feasible trials; medians of "
        f"{REPEATS} runs. Reference: one copy of the n trials and one PED-ANOVA fit per "
        "objective (`param_importances(snap, resamples=1)`: the report's cost before the "
        "bootstrap). Bootstrap: `param_importances` with its "
        "default resample count, each resample copying the n trials into an in-memory study "
        "and refitting once per objective.", "",
        "| n trials | resamples | reference, one fit (ms) | bootstrap (s) | per resample (ms) |",
        "|---|---|---|---|---|", *rows])
    print(body)
    if args.write:
        write_section(HEADING, body, RESULTS)


if __name__ == "__main__":
    main()
