"""Orchestration overhead per trial: moetune vs plain Optuna vs Ray Tune's stock OptunaSearch.

All three run the same trivially short trainable (`tuner.testing.quick_train`: three reported
evaluations, no training) on the same 2-parameter space, one trial at a time, so the wall time
per trial is the trainable's own time plus what the orchestration adds. Each variant runs twice,
with N_SMALL and N_LARGE trials; the per-trial overhead is the slope
(T_large - T_small) / (N_LARGE - N_SMALL) minus the trainable's own time (the fixed cost of a
study — Ray Tune's experiment setup, worker start — falls out of the slope and is shown apart).

    python benchmarks/bench_overhead.py            # prints a table; --write adds it to RESULTS.md

Measured on whatever machine runs it; the figures in RESULTS.md say which.
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
from ray import tune
from ray.tune.search.optuna import OptunaSearch
from results_md import write_section  # benchmarks/ (this script's folder) is on sys.path

from trainers import preset
from tuner import testing
from tuner.study.run.runner import run_study
from tuner.study.specs.spec import spec_from_dict

N_SMALL, N_LARGE = 4, 64
REPEATS = 3  # medians over repeats: the fixed cost (worker start) varies by seconds
TOKENS, EVERY = 300, 100
SPACE = {"params": {"lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
                    "warmup_fraction": {"type": "float", "low": 0.0, "high": 0.2}}}
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
HEADING = "## Orchestration overhead"

optuna.logging.set_verbosity(optuna.logging.WARNING)


def spec_for(name: str, n: int):
    return spec_from_dict({
        "study": {"name": name, "n_trials": n, "max_concurrent": 1, "sampler": "tpe"},
        "budget": {"tokens_per_trial": TOKENS, "eval_every_tokens": EVERY},
        "pruning": {"scheduler": "none"}, "space": SPACE})


SPEC = spec_for("bench", N_LARGE)
ARGS = preset("debug")


def trainable_seconds(reps: int = 200) -> float:
    """The trainable's own time per call (what no orchestrator can remove)."""
    recipe = SPEC.space.to_recipe({"lr": 3e-3, "warmup_fraction": 0.1})
    t = time.perf_counter()
    for _ in range(reps):
        testing.quick_train(ARGS, recipe, token_budget=TOKENS, eval_every_tokens=EVERY,
                            on_eval=lambda *_: None)
    return (time.perf_counter() - t) / reps


def run_plain_optuna(n: int, storage: str | None) -> float:
    def objective(trial: optuna.Trial) -> float:
        recipe = SPEC.space.to_recipe(SPEC.space.suggest(trial))
        return testing.quick_train(ARGS, recipe, token_budget=TOKENS, eval_every_tokens=EVERY,
                                   on_eval=lambda *_: None).val_loss

    t = time.perf_counter()
    study = optuna.create_study(storage=storage, sampler=optuna.samplers.TPESampler(seed=0))
    study.optimize(objective, n_trials=n)
    elapsed = time.perf_counter() - t
    assert len(study.trials) == n
    return elapsed


def run_moetune(n: int, root: Path) -> float:
    spec = spec_for(f"bench-{n}-{time.monotonic_ns()}", n)
    t = time.perf_counter()
    summary = run_study(spec, run_dir=root / spec.name, trainer=testing.quick_train,
                        progress=False)
    elapsed = time.perf_counter() - t
    assert summary.done == n and summary.ran.complete == n, summary
    return elapsed


def _stock_trainable(config: dict) -> None:
    recipe = SPEC.space.to_recipe(config)

    def on_eval(tokens: int, metrics: dict) -> None:
        tune.report({"val_loss": metrics["val_loss"], "tokens_seen": tokens})

    result = testing.quick_train(ARGS, recipe, token_budget=TOKENS, eval_every_tokens=EVERY,
                                 on_eval=on_eval)
    tune.report({"val_loss": result.val_loss, "tokens_seen": TOKENS + 1})


def run_ray_optuna_search(n: int, root: Path) -> float:
    t = time.perf_counter()
    search = OptunaSearch(space=SPEC.space.distributions(), metric="val_loss", mode="min",
                          sampler=optuna.samplers.TPESampler(seed=0))
    grid = tune.Tuner(
        tune.with_resources(_stock_trainable, {"cpu": 1}),
        tune_config=tune.TuneConfig(search_alg=search, num_samples=n, max_concurrent_trials=1,
                                    reuse_actors=True),
        run_config=tune.RunConfig(name=f"stock-{n}", storage_path=str(root), verbose=0),
    ).fit()
    elapsed = time.perf_counter() - t
    assert len(grid) == n and not grid.errors, (len(grid), grid.errors)
    return elapsed


def measure() -> dict[str, tuple[float, float, float]]:
    """variant -> (fixed s per study, marginal s per trial, wall s per trial at N_LARGE)."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        variants = {
            "plain optuna.optimize, in memory": lambda n: run_plain_optuna(n, None),
            "plain optuna.optimize, SQLite": lambda n: run_plain_optuna(
                n, f"sqlite:///{root}/plain-{n}.db"),
            "Ray Tune + stock OptunaSearch (in memory)": lambda n: run_ray_optuna_search(
                n, root),
            "moetune (Ray Tune + StudySearcher, SQLite)": lambda n: run_moetune(n, root),
        }
        for name, fn in variants.items():
            small = statistics.median(fn(N_SMALL) for _ in range(REPEATS))
            large = statistics.median(fn(N_LARGE) for _ in range(REPEATS))
            per_trial = (large - small) / (N_LARGE - N_SMALL)
            out[name] = (small - N_SMALL * per_trial, per_trial, large / N_LARGE)
            print(f"{name}: {N_SMALL} trials {small:.2f} s, {N_LARGE} trials {large:.2f} s "
                  f"(medians of {REPEATS})", file=sys.stderr)
    return out


def table(results: dict[str, tuple[float, float, float]], own: float) -> str:
    lines = [f"| variant | fixed per study (s) | per trial (s) | overhead per trial (s) | "
             f"overhead / 60 s trial | wall per trial, {N_LARGE}-trial study (s) |",
             "|---|---|---|---|---|---|"]
    for name, (fixed, per_trial, wall) in results.items():
        overhead = max(per_trial - own, 0.0)
        lines.append(f"| {name} | {fixed:.2f} | {per_trial:.4f} | {overhead:.4f} | "
                     f"{overhead / 60:.3%} | {wall:.3f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"update {RESULTS.name}")
    args = parser.parse_args()
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING,
             log_to_driver=False)
    logging.getLogger("ray.tune").setLevel(logging.WARNING)
    own = trainable_seconds()
    results = measure()
    ray.shutdown()
    body = "\n".join([
        f"Measured {dt.date.today().isoformat()} on {platform.machine()}, "
        f"{os.cpu_count()} CPU cores, Python {platform.python_version()}, "
        f"Ray {ray.__version__}, Optuna {optuna.__version__}.",
        "Command: `python benchmarks/bench_overhead.py --write`.",
        "",
        f"Same trivially short trainable everywhere (`tuner.testing.quick_train`, "
        f"{own * 1e3:.2f} ms per call, 3 reported evaluations), TPE, one trial at a time. "
        f"Per trial = slope between {N_SMALL}- and {N_LARGE}-trial studies (median wall "
        f"times of {REPEATS} runs each); fixed = the rest (Ray Tune experiment setup, worker "
        "start). Overhead = per trial minus the trainable's own time; '/ 60 s trial' is that "
        "overhead as a share of a 60 s trial. moetune persists every trial (SQLite, WAL) with "
        "its full records; the stock OptunaSearch keeps its study in memory. Other jobs shared "
        "the 2 cores during the run, so treat differences under ~10 ms per trial as noise.",
        "",
        table(results, own),
    ])
    print(body)
    if args.write:
        write_section(HEADING, body, RESULTS)


if __name__ == "__main__":
    main()
