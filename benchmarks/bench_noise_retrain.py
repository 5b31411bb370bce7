"""A study's noise re-trainings: one after another in the driver against Ray tasks, two at once.

One small study of real trainings (debug proxy, stdlib corpus, fp32, one thread per trial) runs
its trials first; then the same re-trainings (its ``noise_top`` best trials, each with
``noise_repeats`` other seeds: 2 x 2 = 4 runs) are measured both ways side by side in this
process, alternating which goes first each round: `measure_noise` alone (in this process, one
after another, as every study did before) and ``on_ray`` (Ray tasks, ``max_concurrent`` = 2 at
once, as a study now runs them). Both must give the same val_loss per run: the same computation,
only scheduled differently. The figure is the wall-time ratio; on 2 cores at most 2x.

    python benchmarks/bench_noise_retrain.py --write      # ~7 min on 2 cores
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import optuna
import ray
from results_md import publish  # benchmarks/ (this script's folder) is on sys.path

from trainers import train
from tuner.study.run.noise_retrain import measure_noise
from tuner.study.run.runner import run_study
from tuner.study.specs.spec import spec_from_dict
from tuner.study.store import records

HEADING = "## A study's noise re-trainings, one after another vs two at once"
optuna.logging.set_verbosity(optuna.logging.WARNING)


def spec_for(tokens: int, *, repeats: int):
    return spec_from_dict({
        "study": {"name": "noise-bench", "n_trials": 2, "max_concurrent": 2, "seed": 0,
                  "sampler": "random", "noise_repeats": repeats, "noise_top": 2},
        "model": {"preset": "debug"},
        "budget": {"tokens_per_trial": tokens, "eval_every_tokens": tokens},
        "pruning": {"scheduler": "none"},
        "space": {"params": {"lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True}},
                  "fixed": {"seq_len": 128, "batch_end": 2, "batch_schedule": "constant",
                            "precision": "fp32"}}})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=262_144, help="tokens per run (default 262144)")
    p.add_argument("--rounds", type=int, default=2, help="rounds of both ways (default 2)")
    p.add_argument("--write", action="store_true", help="write the section of RESULTS.md")
    a = p.parse_args()

    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING,
             log_to_driver=False)
    with tempfile.TemporaryDirectory() as tmp:
        study_spec = spec_for(a.tokens, repeats=0)  # the trials only: noise measured below
        summary = run_study(study_spec, run_dir=Path(tmp) / "run", progress=False,
                            storage=f"sqlite:///{tmp}/bench.db")
        study = optuna.load_study(study_name=study_spec.name, storage=summary.storage)
        spec = spec_for(a.tokens, repeats=2)
        walls: dict[bool, list[float]] = {False: [], True: []}
        losses: dict[bool, list[list[float]]] = {False: [], True: []}
        for k in range(a.rounds):
            for on_ray in ((False, True) if k % 2 == 0 else (True, False)):
                study.set_user_attr(records.NOISE, None)
                t0 = time.perf_counter()
                noise = measure_noise(study, spec, trainer=train, on_ray=on_ray)
                walls[on_ray].append(time.perf_counter() - t0)
                assert noise is not None, "no noise measured"
                losses[on_ray].append([float(r["val_loss"]) for r in noise["runs"]])
                print(f"round {k + 1}, {'two at once' if on_ray else 'one after another'}: "
                      f"{walls[on_ray][-1]:.1f} s, val_loss {losses[on_ray][-1]}", flush=True)
    ray.shutdown()

    same = all(x == losses[False][0] for x in losses[False] + losses[True])
    seq, par = statistics.median(walls[False]), statistics.median(walls[True])
    lines = [
        f"Measured {dt.date.today()} on {platform.machine()}, {os.cpu_count()} CPU cores, "
        f"Python {platform.python_version()}, Ray {ray.__version__}, "
        f"torch {__import__('torch').__version__}.",
        f"Command: `python benchmarks/bench_noise_retrain.py --tokens {a.tokens} "
        f"--rounds {a.rounds}{' --write' if a.write else ''}`.",
        "",
        f"A study's noise re-trainings (real trainings: debug proxy, stdlib corpus, fp32, "
        f"{a.tokens:,} tokens per run at 256 tokens per step, 2 top trials x 2 other seeds = 4 "
        f"runs, one thread each) timed both ways side by side in one process, {a.rounds} "
        "rounds, alternating which goes first; medians. 'One after another' is how every "
        "study measured its noise before (in the driver, the second core idle); 'two at once' "
        "is how a study does now (Ray tasks, max_concurrent = 2).",
        "",
        "| re-trainings | wall (s), median | per round (s) |",
        "|---|---|---|",
        f"| one after another, in the driver (reference) | {seq:.1f} | "
        f"{', '.join(f'{w:.1f}' for w in walls[False])} |",
        f"| two at once, Ray tasks | {par:.1f} | {', '.join(f'{w:.1f}' for w in walls[True])} |",
        "",
        f"**Speed-up {seq / par:.2f}x** (at most 2x on 2 cores). Same val_loss for every run "
        f"both ways in every round: {'yes' if same else 'NO'} (the same computation, "
        "scheduled differently).",
    ]
    if a.write:
        publish(HEADING, lines)
    else:
        print("\n".join(lines))
    if not same:
        sys.exit("the two ways gave different val_loss: not the same computation")


if __name__ == "__main__":
    main()
