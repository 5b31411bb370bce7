"""Record REAL proxy trainings for the search-efficiency benchmark (measured, not modeled).

Two tables, each one JSON file next to this script:

- ``grid.json``: the ``debug`` proxy on the default stdlib corpus over a grid of the
  ``deepseek_v3.toml`` knobs that matter at this scale (lr × warmup_fraction × batch_schedule ×
  bias_update_speed, bf16), plus fp8 at a few points (fp8 is EMULATED on CPU: its numerics are
  faithful, its speed is not) and a few repeated seeds (run-to-run noise). Every run keeps its
  learning curve (val_loss at every evaluation), so a surrogate can replay pruning.
- ``throughput.json``: tokens_per_s and peak memory per batch_schedule × precision, ONE run at a
  time (the grid's own tokens_per_s is recorded but shares the cores with a second run and with
  whatever else the machine does; the computation does not depend on lr, warmup or γ, so speed is
  measured once per schedule and precision, repeated).
- ``fidelity.json``: 12 recipes trained at ``proxy-s`` (the same token budget as the grid), to
  compare their ranking with the same recipes at ``debug`` (taken from ``grid.json``).

Runs go two at a time, one torch thread each. Same seed → same val_loss curves (CPU kernels are
deterministic at one thread); tokens_per_s and train_time_s are wall-clock measurements and vary
with machine load.

    python benchmarks/search/record.py grid
    python benchmarks/search/record.py throughput
    python benchmarks/search/record.py fidelity
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import multiprocessing as mp
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOKEN_BUDGET = 60_000
EVAL_EVERY = 7_500
SEED = 0
CACHE = Path("/tmp/moetune-search-record-cache")

# The grid (bf16). Ranges follow search_spaces/quickstart.toml, which samples these knobs.
LRS = (3e-4, 1e-3, 3e-3, 1e-2, 2e-2)
WARMUPS = (0.0, 0.2)
SCHEDULES = ("constant", "linear", "step")
GAMMAS = (1e-4, 1e-2)
# Fixed for every run (quickstart's [space.fixed] + Recipe defaults for the rest).
FIXED = {"batch_start": 8, "batch_end": 32, "seq_len": 128, "batch_ramp_fraction": 0.1}
# fp8 (emulated) at a few bf16 grid points, to measure its loss and speed offset against them.
FP8_POINTS = [{"lr": lr, "warmup_fraction": 0.0, "batch_schedule": "constant",
               "bias_update_speed": 1e-4} for lr in (1e-3, 3e-3, 1e-2)]
REPEAT_POINTS = [{"lr": 3e-3, "warmup_fraction": 0.2, "batch_schedule": "constant",
                  "bias_update_speed": 1e-4},
                 {"lr": 1e-2, "warmup_fraction": 0.0, "batch_schedule": "step",
                  "bias_update_speed": 1e-2}]
REPEAT_SEEDS = (1,)
# Fidelity runs are shorter (proxy-s is ~4x slower than debug); both presets get this budget.
FIDELITY_BUDGET = 30_000
# Fidelity: 12 grid recipes spread over the grid (every lr, every schedule, both gammas).
FIDELITY_POINTS = [
    {"lr": lr, "warmup_fraction": w, "batch_schedule": s, "bias_update_speed": g}
    for lr, w, s, g in [
        (3e-4, 0.1, "constant", 1e-4), (3e-4, 0.0, "step", 1e-2),
        (1e-3, 0.2, "linear", 1e-4), (1e-3, 0.0, "constant", 1e-2),
        (3e-3, 0.1, "step", 1e-4), (3e-3, 0.2, "constant", 1e-2), (3e-3, 0.0, "linear", 1e-4),
        (1e-2, 0.1, "linear", 1e-2), (1e-2, 0.2, "step", 1e-4), (1e-2, 0.0, "constant", 1e-4),
        (2e-2, 0.0, "linear", 1e-4), (2e-2, 0.2, "constant", 1e-2)]]


def grid_jobs() -> list[dict]:
    jobs = [{"preset": "debug", "precision": "bf16", "seed": SEED,
             "params": {"lr": lr, "warmup_fraction": w, "batch_schedule": s,
                        "bias_update_speed": g}}
            for lr, w, s, g in itertools.product(LRS, WARMUPS, SCHEDULES, GAMMAS)]
    jobs += [{"preset": "debug", "precision": "fp8", "seed": SEED, "params": p}
             for p in FP8_POINTS]
    jobs += [{"preset": "debug", "precision": "bf16", "seed": s, "params": p}
             for p in REPEAT_POINTS for s in REPEAT_SEEDS]
    return jobs


THROUGHPUT_REPEATS = 3


def throughput_jobs() -> list[dict]:
    return [{"preset": "debug", "precision": prec, "seed": SEED, "repeat": i,
             "params": {"lr": 3e-3, "warmup_fraction": 0.0, "batch_schedule": s,
                        "bias_update_speed": 1e-4}}
            for i in range(THROUGHPUT_REPEATS) for s in SCHEDULES for prec in ("bf16", "fp8")]


def fidelity_jobs() -> list[dict]:
    return [{"preset": name, "precision": "bf16", "seed": SEED, "params": p,
             "token_budget": FIDELITY_BUDGET, "eval_every_tokens": FIDELITY_BUDGET // 2}
            for name in ("debug", "proxy-s") for p in FIDELITY_POINTS]


def _init() -> None:
    import torch

    torch.set_num_threads(1)


def run_one(job: dict) -> dict:
    """Train one recipe for real and keep what the benchmark needs."""
    from trainers import Recipe, preset, train

    cached = _cache_path(job)
    if cached.exists():  # an interrupted recording resumes without retraining finished runs
        return json.loads(cached.read_text())
    import os

    load_before = os.getloadavg()[0]
    recipe = Recipe(**job["params"], **FIXED, precision=job["precision"], seed=job["seed"])
    t0 = time.perf_counter()
    r = train(preset(job["preset"]), recipe, token_budget=job.get("token_budget", TOKEN_BUDGET),
              seed=job["seed"], eval_every_tokens=job.get("eval_every_tokens", EVAL_EVERY))
    out = {**job, "val_loss": _num(r.val_loss),
            "curve": [[int(t), _num(v)] for t, v in r.eval_curve],
            "tokens_per_s": round(r.tokens_per_s, 1), "train_time_s": round(r.train_time_s, 3),
            "wall_s": round(time.perf_counter() - t0, 3),
            "peak_memory_bytes": int(r.peak_memory_bytes), "diverged": bool(r.diverged),
            "max_vio_val": _num(r.max_vio_val), "fp8_emulated": r.fp8_emulated,
            "load_avg_1min_before": round(load_before, 2)}
    CACHE.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(out))
    return out


def _cache_path(job: dict) -> Path:
    return CACHE / (hashlib.sha256(json.dumps(job, sort_keys=True).encode()).hexdigest()[:20]
                    + ".json")


def _num(v: float) -> float | str:
    v = float(v)
    return round(v, 5) if v == v and abs(v) != float("inf") else str(v)


def record(which: str, processes: int = 2, *, resume: bool = False) -> Path:
    import torch

    jobs = {"grid": grid_jobs, "throughput": throughput_jobs, "fidelity": fidelity_jobs}[which]()
    if which == "throughput":
        processes = 1  # alone on the machine (as far as this script controls it)
    if not resume:  # a fresh recording measures again; --resume keeps finished runs
        for job in jobs:
            _cache_path(job).unlink(missing_ok=True)
    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(processes, initializer=_init) as pool:
        runs = []
        for i, run in enumerate(pool.imap(run_one, jobs), 1):
            runs.append(run)
            print(f"[{i}/{len(jobs)}] {run['preset']} {run['precision']} {run['params']} "
                  f"val_loss={run['val_loss']} tok/s={run['tokens_per_s']}", flush=True)
    out = HERE / f"{which}.json"
    meta = {"what": f"real proxy trainings ({which}); measured on "
                    f"{platform.machine()}, {mp.cpu_count()} CPU cores, {processes} runs at a "
                    "time, 1 torch thread each; fp8 is emulated on CPU",
            "date": time.strftime("%Y-%m-%d"), "command": f"python benchmarks/search/record.py "
                                                           f"{which}",
            "torch": torch.__version__, "python": platform.python_version(),
            "token_budget": FIDELITY_BUDGET if which == "fidelity" else TOKEN_BUDGET,
            "eval_every_tokens": FIDELITY_BUDGET // 2 if which == "fidelity" else EVAL_EVERY,
            "fixed": FIXED,
            "corpus": "stdlib (default)", "wall_s": round(time.perf_counter() - t0, 1)}
    out.write_text(json.dumps({"meta": meta, "runs": runs}, separators=(",", ":")) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("which", choices=("grid", "throughput", "fidelity"))
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--resume", action="store_true",
                   help=f"reuse runs an interrupted recording finished (cached in {CACHE})")
    a = p.parse_args(argv)
    print(record(a.which, a.processes, resume=a.resume))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parents[1]))
    sys.exit(main())
