"""Search efficiency on the surrogate: our default (TPE + ASHA) vs the alternatives, many seeds.

Every study is replayed by `benchmarks.search.replay` on `benchmarks.search.surrogate` (an
interpolation of the real runs recorded in grid.json, not new trainings). Per method and seed it
records the hypervolume of (val_loss min, tokens_per_s max) and the best val_loss after every
trial, with the training tokens spent so far, and summarises medians and IQRs.

    python benchmarks/search/compare.py                  # prints the summary
    python benchmarks/search/compare.py --write          # + compare.json, compare_hv_vs_tokens.png
    python benchmarks/search/compare.py --methods default,tpe_asha_grace30k --out variants --write
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from benchmarks.search import replay as rp  # noqa: E402
from benchmarks.search.surrogate import LABEL, Surrogate  # noqa: E402

N_TRIALS = 40
BUDGET = 60_000  # tokens per trial, the recorded runs' budget
OBJECTIVES = ("val_loss", "tokens_per_s")
MAX_CONCURRENT = 2  # the spec default
GRACE = 15_000  # a quarter of the 60k budget, the share quickstart.toml uses (50k of 200k)
REDUCTION = 3.0  # the spec default
# (key, label, sampler, scheduler, extra StudySpec settings)
METHODS = [
    ("default", "TPE + ASHA (default before 2026-11-30)", "tpe", "asha", {}),
    ("tpe", "TPE, no pruning", "tpe", "none", {}),
    ("random", "random, no pruning (Ray Tune's default)", "random", "none", {}),
    ("random_asha", "random + ASHA", "random", "asha", {}),
    ("nsga2", "NSGA-II + ASHA", "nsga2", "asha", {}),
    ("gp", "GPSampler + ASHA", "gp", "asha", {}),
]
# Candidate default changes, run only when named with --methods.
VARIANTS = [
    ("tpe_asha_grace30k", "TPE + ASHA, grace 30k tokens", "tpe", "asha", {"grace": 30_000}),
    ("tpe_asha_grace7k", "TPE + ASHA, grace 7.5k tokens", "tpe", "asha", {"grace": 7_500}),
    ("tpe_asha_serial", "TPE + ASHA, 1 trial at a time", "tpe", "asha", {"max_concurrent": 1}),
    ("gp_nopruning", "GPSampler, no pruning", "gp", "none", {}),
    ("nsga2_nopruning", "NSGA-II, no pruning", "nsga2", "none", {}),
    # what a spec gets since 2026-11-30: sampler = "auto", pruning = "auto" (resolved by the
    # service itself: GP here; pruning auto = ASHA for val_loss alone until the asha replay
    # of 2026-11-30 showed it losing there too, no pruning since)
    ("auto_default", "default since 2026-11-30: sampler auto, pruning auto", "auto", "auto", {}),
    # GP's random start, pinned through [study] startup_trials (the rule gives 10 at 40 trials)
    *[(f"gp_startup{k}", f"GPSampler, no pruning, {k} random start trials", "gp", "none",
       {"startup": k}) for k in (3, 5, 7, 10)],
    # ASHA with earlier / harsher rungs (the surrogate has an evaluation every ~8k tokens, so a
    # rung below that is decided at the first evaluation)
    *[(f"{s}_asha_g{g}_rf{rf}", f"{lbl} + ASHA, grace {g / 1000:g}k, rf {rf}", s,
       "asha", {"grace": g, "reduction": float(rf)})
      for s, lbl in (("gp", "GPSampler"), ("tpe", "TPE"))
      for g, rf in ((7_500, 3), (7_500, 4), (3_750, 4))
      if (s, g, rf) != ("tpe", 7_500, 3)],  # that one is tpe_asha_grace7k
]
# The same sampler without pruning, for "tokens to the same best val_loss" (ASHA's saving).
NO_PRUNING_OF = {"gp": "gp_nopruning", "tpe": "tpe"}


def make_spec(*, sampler: str, scheduler: str, seed: int, n_trials: int = N_TRIALS,
              max_concurrent: int = MAX_CONCURRENT, grace: int = GRACE,
              reduction: float = REDUCTION, startup: int | str = "auto",
              budget: int = 60_000, objectives: tuple[str, ...] = OBJECTIVES) -> Any:
    """A real StudySpec over the recorded knobs (validated like a spec file)."""
    from tuner.study.specs.spec import spec_from_dict

    return spec_from_dict({
        "study": {"name": "surrogate", "n_trials": n_trials, "max_concurrent": max_concurrent,
                  "seed": seed, "sampler": sampler, "startup_trials": startup},
        "model": {"preset": "debug"},
        "budget": {"tokens_per_trial": budget, "eval_every_tokens": 7_500},
        "objectives": {n: {"val_loss": "minimize", "tokens_per_s": "maximize"}[n]
                       for n in objectives},
        "pruning": {"scheduler": scheduler, "grace_tokens": grace,
                    "reduction_factor": reduction},
        "space": {"params": {
            "lr": {"type": "float", "low": 3e-4, "high": 2e-2, "log": True},
            "warmup_fraction": {"type": "float", "low": 0.0, "high": 0.2},
            "batch_schedule": {"type": "categorical", "choices": ["constant", "linear", "step"]},
            "bias_update_speed": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
            "precision": {"type": "categorical", "choices": ["bf16", "fp8"]}},
            "fixed": {"batch_start": 8, "batch_end": 32, "seq_len": 128}},
    })


def run_methods(surrogate: Surrogate, methods: list[tuple], seeds: range,
                token_budget: float | None = None, noise: float = 0.0, jobs: int = 1,
                **spec_kw: Any) -> dict[str, list[dict]]:
    """Every (method, seed) study, ``jobs`` at a time (each in one torch thread, so the
    result does not depend on ``jobs``)."""
    tasks = [(m, seed, token_budget, noise, spec_kw) for m in methods for seed in seeds]
    t0 = time.perf_counter()
    if jobs > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(jobs, mp_context=mp.get_context("fork"),
                                 initializer=_init_worker, initargs=(surrogate,)) as pool:
            done = list(pool.map(_one_task, tasks))
    else:
        _init_worker(surrogate)
        done = [_one_task(t) for t in tasks]
    out: dict[str, list[dict]] = {}
    for (m, *_), r in zip(tasks, done, strict=True):
        out.setdefault(m[0], []).append(r)
    for key, label, *_ in methods:
        secs = sum(r["cpu_s"] for r in out[key])
        print(f"{label}: {len(seeds)} seeds, {secs:.1f} s of replay", flush=True)
    print(f"all: {time.perf_counter() - t0:.1f} s wall, {jobs} at a time", flush=True)
    return out


_SURROGATE: Surrogate | None = None


def _init_worker(surrogate: Surrogate) -> None:
    global _SURROGATE
    import torch

    torch.set_num_threads(1)  # GPSampler fits with torch; one thread per replay
    _SURROGATE = surrogate


def _one_task(task: tuple) -> dict:
    from tuner.study.trial.samplers import resolve_sampler_name, startup_trials

    (key, _label, sampler, scheduler, extra), seed, token_budget, noise, spec_kw = task
    t0 = time.perf_counter()
    spec = make_spec(sampler=sampler, scheduler=scheduler, seed=seed, **{**spec_kw, **extra})
    rep = rp.replay(spec, _SURROGATE, method=key, token_budget=token_budget, noise=noise)
    return {"sampler": resolve_sampler_name(spec),  # what "auto" became
            "scheduler": spec.pruning.scheduler,
            "grace": spec.pruning.grace_tokens, "rf": spec.pruning.reduction_factor,
            "startup": startup_trials(spec),
            "hv": rp.hypervolume_curve(rep), "best": rp.best_loss_curve(rep),
            "pruned": sum(t.state == "pruned" for t in rep.trials),
            "by_schedule": {
                sched: [sum(t.params.get("batch_schedule") == sched for t in rep.trials),
                        sum(t.params.get("batch_schedule") == sched and t.state == "pruned"
                            for t in rep.trials)]
                for sched in ("constant", "linear", "step")},
            "clock_s": rep.trials[-1].clock_s, "trials": len(rep.trials),
            "cpu_s": time.perf_counter() - t0}


def first_reach(curve: list[tuple[int, float, float]], target: float,
                better: str = "max") -> tuple[float, float]:
    """(trials, tokens) when the curve first reaches ``target``; (inf, inf) if it never does."""
    for k, tokens, v in curve:
        if (v >= target * (1 - 1e-12)) if better == "max" else (v <= target + 1e-12):
            return k, tokens
    return math.inf, math.inf


def _stats(xs: list[float]) -> dict[str, float]:
    a = np.asarray(xs, float)
    if np.isinf(a).sum() * 2 >= len(a):  # half or more never reached: no median
        return {"median": math.inf, "q1": math.inf, "q3": math.inf,
                "reached": int(np.isfinite(a).sum()), "n": len(a)}
    with np.errstate(invalid="ignore"):
        q1, med, q3 = np.nan_to_num(np.percentile(a, [25, 50, 75]), nan=math.inf)
    return {"median": float(med), "q1": float(q1), "q3": float(q3),
            "reached": int(np.isfinite(a).sum()), "n": len(a)}


def summarise(res: dict[str, list[dict]]) -> dict[str, Any]:
    random_final = float(np.median([r["hv"][-1][2] for r in res["random"]]))
    random_tokens = float(np.median([r["hv"][-1][1] for r in res["random"]]))
    tpe_best = float(np.median([r["best"][-1][2] for r in res["tpe"]]))
    out: dict[str, Any] = {"random_final_hv": random_final, "random_final_tokens": random_tokens,
                           "tpe_nopruning_final_best": tpe_best, "methods": {}}
    for key, runs in res.items():
        reach = [first_reach(r["hv"], random_final) for r in runs]
        best_reach = [first_reach(r["best"], tpe_best, "min") for r in runs]
        out["methods"][key] = {
            "hv_final": _stats([r["hv"][-1][2] for r in runs]),
            "tokens_total": _stats([r["hv"][-1][1] for r in runs]),
            "best_val_loss": _stats([r["best"][-1][2] for r in runs]),
            "pruned": _stats([r["pruned"] for r in runs]),
            "trials": _stats([r["trials"] for r in runs]),
            # trials proposed / pruned per batch schedule, summed over seeds
            "by_schedule": {k: [sum(r["by_schedule"][k][i] for r in runs) for i in (0, 1)]
                            for k in runs[0]["by_schedule"]},
            "trials_to_random_hv": _stats([t for t, _ in reach]),
            "tokens_to_random_hv": _stats([k for _, k in reach]),
            "tokens_to_tpe_best": _stats([k for _, k in best_reach]),
            "sampler": runs[0]["sampler"], "scheduler": runs[0]["scheduler"],
            "startup_trials": runs[0]["startup"],
            "grace_tokens": runs[0]["grace"], "reduction_factor": runs[0]["rf"],
        }
        # ASHA's saving at equal result: tokens until the same sampler without pruning's
        # median final best val_loss is reached, by that study and by this one.
        ref = NO_PRUNING_OF.get(runs[0]["sampler"])
        if ref in res:
            target = float(np.median([r["best"][-1][2] for r in res[ref]]))
            out["methods"][key]["same_best"] = {
                "reference": ref, "target": target,
                "tokens": _stats([first_reach(r["best"], target, "min")[1] for r in runs])}
    return out


def plot(res: dict[str, list[dict]], path: Path, labels: dict[str, str],
         target: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = np.linspace(0, max(r["hv"][-1][1] for runs in res.values() for r in runs), 300)
    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    top = 0.0
    for key, runs in res.items():
        # Drawn only while every seed is still running, so the median is over all seeds.
        end = min(r["hv"][-1][1] for r in runs)
        x = grid[grid <= end]
        curves = np.array([_step_at(r["hv"], x) for r in runs])
        med = np.median(curves, axis=0)
        q1, q3 = np.percentile(curves, [25, 75], axis=0)
        top = max(top, float(q3.max()))
        for ax in axes:
            ax.plot(x / 1e6, med, label=labels[key])
            ax.fill_between(x / 1e6, q1, q3, alpha=0.12)
    for ax in axes:
        ax.axhline(target, color="k", lw=0.8, ls="--", label="target: random's median final")
        ax.set_xlabel("training tokens spent (millions)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("hypervolume")
    axes[0].set_title("full range", fontsize=9)
    axes[1].set_ylim(target - 0.06 * abs(target), top + 0.01 * abs(target))
    axes[1].set_title("zoom near the target", fontsize=9)
    axes[1].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"Hypervolume vs compute, median and IQR of {len(next(iter(res.values())))} "
                 f"seeds ({LABEL})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _step_at(curve: list[tuple[int, float, float]], grid: np.ndarray) -> np.ndarray:
    xs = np.array([c[1] for c in curve])
    ys = np.array([c[2] for c in curve])
    idx = np.searchsorted(xs, grid, side="right") - 1
    out = np.where(idx >= 0, ys[np.clip(idx, 0, None)], 0.0)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--jobs", type=int, default=1,
                   help="replays at once (processes); results do not depend on it")
    p.add_argument("--methods", default=",".join(m[0] for m in METHODS))
    p.add_argument("--write", action="store_true")
    p.add_argument("--out", default="compare", help="file stem for the JSON and PNG written")
    p.add_argument("--noise", type=float, default=0.0,
                   help="per-trial val_loss noise (std) added to the surrogate; 0 = none")
    p.add_argument("--objectives", default=",".join(OBJECTIVES),
                   help="val_loss,tokens_per_s (default) or val_loss alone")
    a = p.parse_args(argv)
    objectives = tuple(a.objectives.split(","))
    if objectives not in (OBJECTIVES, ("val_loss",)):
        p.error(f"--objectives: must be {','.join(OBJECTIVES)} or val_loss, but got "
                f"{a.objectives!r}")
    import importlib.util

    keys = a.methods.split(",") + ["random", "tpe"]  # the references every summary needs
    known = [m[0] for m in METHODS + VARIANTS]
    if unknown := sorted(set(keys) - set(known)):
        p.error(f"--methods: unknown {unknown}; valid: {known}")
    methods = [m for m in METHODS + VARIANTS if m[0] in keys
               and (m[2] != "gp" or importlib.util.find_spec("scipy"))]
    sur = Surrogate.load()
    t0 = time.perf_counter()
    # Equal compute: every study may spend what N_TRIALS unpruned trials spend; a study that
    # prunes runs more trials in it.
    res = run_methods(sur, methods, range(a.seeds), token_budget=N_TRIALS * BUDGET,
                      noise=a.noise, jobs=a.jobs, objectives=objectives)
    summary = summarise(res)
    summary.update({"seeds": a.seeds, "objectives": list(objectives), "n_trials": N_TRIALS,
                    "noise": a.noise,
                    "token_budget": N_TRIALS * BUDGET,
                    "max_concurrent": MAX_CONCURRENT,
                    "grace_tokens": GRACE, "reduction_factor": REDUCTION,
                    "reference": rp.REFERENCE, "label": LABEL,
                    "speed_source": sur.speed_source,
                    "labels": {m[0]: m[1] for m in methods},
                    "date": time.strftime("%Y-%m-%d"),
                    "jobs": a.jobs, "seconds": round(time.perf_counter() - t0, 1)})
    print(json.dumps(summary, indent=1))
    if a.write:
        (HERE / f"{a.out}.json").write_text(json.dumps(summary, indent=1) + "\n")
        plot(res, HERE / f"{a.out}_hv_vs_tokens.png", summary["labels"],
             summary["random_final_hv"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
