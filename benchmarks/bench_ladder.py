"""A ladder of widths on real trainings: compute to reach the top width's answer, and µP vs not.

    nice -n 15 python benchmarks/bench_ladder.py            # ~20 min on 2 cores; resumable
    python benchmarks/bench_ladder.py --results             # JSON -> PNG + RESULTS.md section
    python benchmarks/bench_ladder.py --smoke               # tiny, into a temp JSON
    nice -n 15 python benchmarks/bench_ladder.py --wide     # part A at widths 32 -> 256 alone

A. Per seed: a ladder (`[ladder] widths = 32, 64, 128` of the ``debug`` proxy, µP on, 12
   candidates drawn at random at the bottom, promote 0.25: 12 -> 3 -> 1) through the product's
   own path (`tuner.study.workflows.stage_runner.run_stages`, Ray Tune, the real trainer), and "all
   at the top": the same 12 candidates trained at width 128 with the same model (µP base 32), as
   the top rung's study would train them (`rung_spec` with every candidate enqueued), its best
   recipe re-trained with 2 more seeds for the noise. Compute = Σ 6 × active parameters × tokens
   over the trainings each spent (modeled from counts; the noise re-runs are not counted). The
   ladder reaches the top quality when its answer's val_loss is within the noise of the best of all
   12 at the top.
B. µP vs standard parametrization: the same 6 learning rates trained at widths 32, 64, 128 with
   µP (base 32) and without, seed 0: where the best lr sits per width, how far it moves from 32
   to 128, and Spearman's ρ of the lr ranking between widths; the figure val_loss vs lr per width.

Each finished piece is written to ladder.json at once; a rerun skips what is there.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import dataclasses
import datetime
import json
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

OUT = HERE / "ladder.json"
PNG = "ladder_lr_vs_width.png"
HEADING = "## A ladder of widths (real trainings)"
CONFIG: dict[str, Any] = {
    "widths": [32, 64, 128], "candidates": 12, "promote": 0.25, "tokens": 60_000,
    "eval_every": 30_000, "seeds": [0, 1, 2], "preset": "debug",
    "lrs": [1e-3, 2.5e-3, 6e-3, 1.5e-2, 3.5e-2, 8e-2, 0.2]}
SMOKE = CONFIG | {"widths": [16, 32], "candidates": 3, "promote": 0.34, "tokens": 2_048,
                  "eval_every": 1_024, "seeds": [0], "lrs": [1e-3, 1e-2]}
# part A alone over a wider span (a 256-wide training is ~3x a 128-wide one: no lr sweep there)
WIDE = CONFIG | {"widths": [32, 64, 128, 256], "lrs": []}
OUT_WIDE = HERE / "ladder_wide.json"
HEADING_WIDE = "## A ladder of widths, 32 → 256 (real trainings)"
SPACE = {"params": {
    "lr": {"type": "float", "low": 1e-3, "high": 8e-2, "log": True},
    "warmup_fraction": {"type": "float", "low": 0.0, "high": 0.3},
    "batch_end": {"type": "categorical", "choices": [8, 16, 32]}},
    "fixed": {"batch_schedule": "constant", "seq_len": 128, "precision": "fp32"}}


def ladder_spec(cfg: dict[str, Any], seed: int, name: str, *, noise: bool = False) -> Any:
    """The benchmark's ladder; ``noise``: each rung re-trains its best recipe with 2 more seeds
    (`[study] noise_repeats`), so promotion keeps candidates tied within that noise together."""
    from tuner.study.specs.spec import spec_from_dict

    return spec_from_dict({
        "study": {"name": name, "n_trials": cfg["candidates"], "max_concurrent": 2,
                  "sampler": "random", "seed": seed,
                  "noise_repeats": 2 if noise else 0, "noise_top": 1},
        "model": {"preset": cfg["preset"]},
        "budget": {"tokens_per_trial": cfg["tokens"], "eval_every_tokens": cfg["eval_every"]},
        "resources": {"cpus_per_trial": 1},
        "space": SPACE,
        "ladder": {"widths": cfg["widths"], "promote": cfg["promote"], "mup": True}})


def flops(spec: Any, n: int, rung: int | None = None) -> float:
    """6 × active parameters × tokens of ``n`` trainings of ``spec``'s model (at ``rung`` of its
    ladder, when given)."""
    from trainers.presets import count_params
    from tuner.study.specs.proxy import resolve_model_args

    if rung is not None:
        spec = dataclasses.replace(spec, ladder=dataclasses.replace(spec.ladder, rung=rung))
    return 6.0 * count_params(resolve_model_args(spec))[1] * spec.budget.tokens_per_trial * n


def run_seed(cfg: dict[str, Any], seed: int, root: Path) -> dict[str, Any]:
    """Part A for one seed: the ladder, then all candidates at the top."""
    from trainers import train
    from tuner.study.results.trial_record import trial_records
    from tuner.study.run.runner import run_study
    from tuner.study.specs.start_spec import StartSection
    from tuner.study.store import records
    from tuner.study.workflows.ladder import promote, rung_spec
    from tuner.study.workflows.stage_runner import run_stages

    spec = ladder_spec(cfg, seed, f"lad-s{seed}")
    run_dir = root / spec.name
    t0 = time.time()
    rungs = run_stages(spec, run_dir=run_dir, trainer=train, progress=False, log=print)
    ladder_s = time.time() - t0
    studies = [s.study for s in rungs]
    used = []
    for i, st in enumerate(studies):
        own = [r for r in trial_records(st) if not r.warm_start and r.values]
        used.append({"width": cfg["widths"][i], "trainings": len(own),
                     "flops": flops(spec, len(own), rung=i),
                     "trials": [{"number": r.number, "params": r.params,
                                 "val_loss": r.values.get("val_loss")} for r in own]})
    answer = min((r for r in trial_records(studies[-1]) if not r.warm_start and r.feasible),
                 key=lambda r: r.values["val_loss"])
    # every candidate at the top width, the same model as the ladder's top rung
    bottom = [r for r in trial_records(studies[0]) if not r.warm_start]
    every = [(r.number, dict(r.params)) for r in bottom]
    top = rung_spec(spec, len(cfg["widths"]) - 1, every)
    top = dataclasses.replace(
        top, study=dataclasses.replace(top.study, name=f"{spec.name}-alltop",
                                       noise_repeats=2, noise_top=1),
        start=StartSection(enqueue=top.start.enqueue))
    t0 = time.time()
    summary = run_study(top, run_dir=root / top.name, trainer=train, progress=False)
    alltop_s = time.time() - t0
    recs = [r for r in trial_records(summary.study) if r.values]
    best = min((r for r in recs if r.feasible), key=lambda r: r.values["val_loss"])
    noise = summary.study.user_attrs.get(records.NOISE) or {}
    by_candidate = {}
    for t in summary.study.get_trials(deepcopy=False):
        point = str(t.user_attrs.get(records.START_POINT) or "")
        if point.startswith("start.enqueue[") and t.values:
            by_candidate[every[int(point[len("start.enqueue["):-1])][0]] = t.values[0]
    return {"seed": seed, "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "rungs": used, "ladder_s": round(ladder_s, 1), "alltop_s": round(alltop_s, 1),
            "answer": {"trial": answer.number, "params": answer.params,
                       "val_loss": answer.values["val_loss"],
                       "bottom_trial": promote_chain(studies)},
            "alltop": {"trainings": len(recs), "flops": flops(top, len(recs)),
                       "best": {"val_loss": best.values["val_loss"], "params": best.params,
                                "candidate": next((c for c, v in by_candidate.items()
                                                   if v == best.values["val_loss"]), None)},
                       "noise_sd": noise.get("sd"), "noise_n": noise.get("n"),
                       "by_candidate": by_candidate},
            "bottom_by_candidate": {r.number: r.values.get("val_loss") for r in bottom
                                    if r.values},
            "promoted": [[n for n, _ in promote(st, cfg["promote"])] for st in studies[:-1]]}


def run_noise_ladder(cfg: dict[str, Any], seed: int, root: Path) -> dict[str, Any]:
    """Part A2: the same ladder (same seed: the same candidates) with noise measured on every
    rung; its compute counts the noise re-runs too."""
    from trainers import train
    from tuner.study.results.trial_record import trial_records
    from tuner.study.store import records
    from tuner.study.workflows.stage_runner import run_stages

    spec = ladder_spec(cfg, seed, f"ladn-s{seed}", noise=True)
    rungs = run_stages(spec, run_dir=root / spec.name, trainer=train, progress=False, log=print)
    studies = [r.study for r in rungs]
    used = []
    for i, st in enumerate(studies):
        own = [r for r in trial_records(st) if not r.warm_start and r.values]
        noise = st.user_attrs.get(records.NOISE) or {}
        reruns = max(0, int(noise.get("n") or 0) - len(noise.get("trials") or []))
        used.append({"width": cfg["widths"][i], "trainings": len(own), "noise_reruns": reruns,
                     "noise_sd": noise.get("sd"),
                     "flops": flops(spec, len(own) + reruns, rung=i)})
    answer = min((r for r in trial_records(studies[-1]) if not r.warm_start and r.feasible),
                 key=lambda r: r.values["val_loss"])
    return {"seed": seed, "rungs": used, "answer": {"val_loss": answer.values["val_loss"],
                                                    "bottom_trial": promote_chain(studies)},
            }


def promote_chain(studies: list[Any]) -> int | None:
    """The bottom trial the ladder's answer descends from (through each rung's promoted)."""
    from tuner.study.workflows.ladder import candidate_pairs

    top = min((b for _, b in candidate_pairs(studies[-2], studies[-1])),
              key=lambda r: r.values["val_loss"], default=None)
    if top is None:
        return None
    number = top.number
    for lower, upper in reversed(list(zip(studies, studies[1:]))):
        pair = next((a for a, b in candidate_pairs(lower, upper) if b.number == number), None)
        if pair is None:
            return None
        number = pair.number
    return number


def sweep_one(args: tuple[str, int, int, bool, float, int, int]) -> dict[str, Any]:
    """Part B: one training (in a worker process, one torch thread)."""
    import torch

    torch.set_num_threads(1)
    from trainers import Recipe, preset, train
    from trainers.presets import at_width

    name, base_width, width, mup, lr, tokens, seed = args
    base = dataclasses.replace(preset(name), mup_base_dim=base_width if mup else 0)
    recipe = Recipe(lr=lr, batch_schedule="constant", batch_end=16, seq_len=128,
                    precision="fp32", warmup_fraction=0.05)
    r = train(at_width(base, width), recipe, token_budget=tokens, seed=seed, device="cpu")
    return {"width": width, "mup": mup, "lr": lr, "seed": seed, "val_loss": r.val_loss,
            "diverged": r.diverged}


def campaign(path: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    data = json.loads(path.read_text()) if path.exists() else {}
    # the seeds and learning rates may grow (each piece is keyed by them); nothing else
    if data and {**data.get("config", {}), "seeds": 0, "lrs": 0} != {**cfg, "seeds": 0, "lrs": 0}:
        raise SystemExit(f"{path}: holds another configuration; move it away to start afresh")
    data["config"] = cfg
    data.setdefault("machine", {"machine": platform.machine(), "cores": os.cpu_count(),
                                "python": platform.python_version()})
    _per_seed(path, data, "seeds", "A", lambda s, root: run_seed(cfg, s, root),
              lambda s: summary_a(data["seeds"][str(s)]))
    _per_seed(path, data, "seeds_noise", "A2", lambda s, root: run_noise_ladder(cfg, s, root),
              lambda s: summary_a2(data, s))
    sweep = data.setdefault("sweep", [])
    done = {(r["width"], r["mup"], r["lr"]) for r in sweep}
    jobs = [(cfg["preset"], cfg["widths"][0], w, mup, lr, cfg["tokens"], 0)
            for mup in (True, False)
            for w in cfg["widths"] for lr in cfg["lrs"] if (w, mup, lr) not in done]
    if jobs:
        with cf.ProcessPoolExecutor(max_workers=2) as pool:
            for r in pool.map(sweep_one, jobs):
                sweep.append(r)
                path.write_text(json.dumps(data, indent=1) + "\n")
                print(f"B {r}", flush=True)
    data["torch"] = __import__("torch").__version__
    path.write_text(json.dumps(data, indent=1) + "\n")
    return data


def _per_seed(path: Path, data: dict[str, Any], key: str, label: str, run: Any,
              summary: Any) -> None:
    """Run ``run(seed, root)`` for every seed ``data[key]`` lacks, under one Ray, saving each."""
    import logging

    import ray

    done = data.setdefault(key, {})
    todo = [s for s in data["config"]["seeds"] if str(s) not in done]
    if not todo:
        return
    root = Path(tempfile.mkdtemp(prefix=f"moetune-bench-ladder-{key}-"))
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    ray.init(include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
    try:
        for s in todo:
            print(f"{label} seed {s}: running", flush=True)
            done[str(s)] = run(s, root)
            path.write_text(json.dumps(data, indent=1) + "\n")
            print(f"{label} seed {s}: {json.dumps(summary(s))}", flush=True)
    finally:
        ray.shutdown()


def summary_a(rec: dict[str, Any]) -> dict[str, Any]:
    ladder = sum(r["flops"] for r in rec["rungs"])
    alltop = rec["alltop"]["flops"]
    sd = rec["alltop"]["noise_sd"]
    gap = rec["answer"]["val_loss"] - rec["alltop"]["best"]["val_loss"]
    from tuner.study.workflows.validate import spearman

    bot, top = rec["bottom_by_candidate"], rec["alltop"]["by_candidate"]
    both = [k for k in bot if k in top and bot[k] is not None]
    return {"seed": rec["seed"], "ladder_flops": ladder, "alltop_flops": alltop,
            "rho_bottom_top": spearman([bot[k] for k in both], [top[k] for k in both]),
            "ratio": ladder / alltop, "answer": rec["answer"]["val_loss"],
            "alltop_best": rec["alltop"]["best"]["val_loss"], "gap": gap, "noise_sd": sd,
            "reached": sd is not None and gap <= sd,
            "same_candidate": rec["answer"]["bottom_trial"] == rec["alltop"]["best"]["candidate"]}


def summary_a2(data: dict[str, Any], seed: int) -> dict[str, Any]:
    rec, base = data["seeds_noise"][str(seed)], data["seeds"][str(seed)]
    ladder = sum(r["flops"] for r in rec["rungs"])
    sd = base["alltop"]["noise_sd"]
    gap = rec["answer"]["val_loss"] - base["alltop"]["best"]["val_loss"]
    top = rec["rungs"][-1]
    top_reruns = top["flops"] * top["noise_reruns"] / max(1, top["trainings"]
                                                          + top["noise_reruns"])
    return {"seed": seed, "ratio": ladder / base["alltop"]["flops"],
            "ratio_no_top_noise": (ladder - top_reruns) / base["alltop"]["flops"],
            "trainings": [r["trainings"] for r in rec["rungs"]],
            "noise_reruns": sum(r["noise_reruns"] for r in rec["rungs"]),
            "answer": rec["answer"]["val_loss"], "alltop_best": base["alltop"]["best"]["val_loss"],
            "gap": gap, "noise_sd": sd, "reached": sd is not None and gap <= sd,
            "same_candidate": rec["answer"]["bottom_trial"] == base["alltop"]["best"]["candidate"]}


def summary_b(data: dict[str, Any]) -> dict[str, Any]:
    from tuner.study.workflows.validate import spearman

    out: dict[str, Any] = {}
    for mup in (True, False):
        rows = [r for r in data["sweep"] if r["mup"] == mup]
        per: dict[int, dict[float, float]] = {}
        for r in rows:
            v = r["val_loss"] if math.isfinite(r["val_loss"]) else float("inf")
            per.setdefault(r["width"], {})[r["lr"]] = v
        widths = sorted(per)
        best = {w: min(per[w], key=per[w].get) for w in widths}
        lrs = sorted(per[widths[0]])
        rho = {}
        for a, b in zip(widths, widths[1:]):
            xs = [per[a][lr] for lr in lrs]
            ys = [per[b][lr] for lr in lrs]
            finite = [(x, y) for x, y in zip(xs, ys) if math.isfinite(x) and math.isfinite(y)]
            rho[f"{a}->{b}"] = spearman([x for x, _ in finite], [y for _, y in finite]) \
                if len(finite) >= 3 else math.nan
        out["mup" if mup else "sp"] = {
            "best_lr": best, "shift_decades": math.log10(best[widths[-1]] / best[widths[0]]),
            "rho": rho, "curves": {w: per[w] for w in widths}}
    return out


def plot(data: dict[str, Any], b: dict[str, Any], path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4))
    for k, (key, title) in enumerate((("mup", "µP (base width 32)"),
                                      ("sp", "standard parametrization"))):
        ax = fig.add_subplot(1, 2, k + 1)
        for w, curve in b[key]["curves"].items():
            lrs = sorted(curve)
            ys = [curve[lr] if math.isfinite(curve[lr]) else math.nan for lr in lrs]
            line = ax.plot(lrs, ys, "o-", label=f"width {w}")
            ax.plot([b[key]["best_lr"][w]], [curve[b[key]["best_lr"][w]]], "*", ms=14,
                    color=line[0].get_color())
        ax.set_xscale("log")
        ax.set_xlabel("learning rate")
        ax.set_ylabel("val_loss after 60k tokens (measured)")
        ax.set_title(f"{title}: best lr moves {b[key]['shift_decades']:+.2f} decades",
                     fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("val_loss vs lr per width, debug proxy at widths 32/64/128 (real trainings, "
                 "CPU, seed 0; ★ best)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def results_lines(data: dict[str, Any], *, out: Path = OUT, command: str = "") -> list[str]:
    cfg = data["config"]
    a = [summary_a(data["seeds"][str(s)]) for s in cfg["seeds"] if str(s) in data["seeds"]]
    w = cfg["widths"]
    lines = [
        f"Measured {str(data['seeds'][str(cfg['seeds'][0])]['date'])[:10]} on this machine "
        f"({data['machine']['machine']}, {data['machine']['cores']} cores, torch "
        f"{data.get('torch', '?')}), real trainings of the `{cfg['preset']}` proxy at widths "
        f"{w} (same depth and experts; `trainers.presets.at_width`), {cfg['tokens']:,} tokens "
        "per training, fp32, seq 128, constant batch. Command: "
        f"`{command or 'nice -n 15 python benchmarks/bench_ladder.py'}` (resumable); data "
        f"[`{out.name}`]({out.name}).", "",
        "### Compute to reach the top width's answer (target ≤ 1/3)", "",
        f"A ladder of {cfg['candidates']} random candidates (lr, warmup, batch), promote "
        f"{cfg['promote']}, µP base {w[0]}, run by `moetune`'s own ladder (Ray Tune, the real "
        f"trainer), against the same {cfg['candidates']} candidates all trained at width "
        f"{w[-1]} with the same model; compute = Σ 6 × active parameters × tokens (modeled from "
        "counts); noise = the sd of the all-at-top best recipe re-trained with 2 more seeds.", "",
        "| seed | ladder compute | all at the top | ratio | ladder's answer | best of all at "
        "the top | gap | noise sd | reached | same recipe |", "|---" * 10 + "|"]
    for s in a:
        sd = f"{s['noise_sd']:.3f}" if s["noise_sd"] is not None else "-"
        lines.append(f"| {s['seed']} | {s['ladder_flops']:.3g} | {s['alltop_flops']:.3g} | "
                     f"**{s['ratio']:.2f}** | {s['answer']:.3f} | {s['alltop_best']:.3f} | "
                     f"{s['gap']:+.3f} | {sd} | {'yes' if s['reached'] else 'no'} | "
                     f"{'yes' if s['same_candidate'] else 'no'} |")
    if a:
        reached = sum(s["reached"] for s in a)
        lines += ["", f"- The ladder spent {min(s['ratio'] for s in a):.2f}–"
                  f"{max(s['ratio'] for s in a):.2f} of the compute of training every candidate "
                  f"at the top, and its answer was within the noise of the best of all at the "
                  f"top in {reached}/{len(a)} seeds.",
                  "- How well the bottom width ranks the candidates the top width ranks "
                  f"(Spearman ρ over all {cfg['candidates']}, each trained at both): "
                  + ", ".join(f"seed {s['seed']} {s['rho_bottom_top']:+.2f}" for s in a) + "."]
    a2 = [summary_a2(data, s) for s in cfg["seeds"] if str(s) in data.get("seeds_noise", {})]
    if a2:
        lines += ["", "The same ladders (same seeds, so the same candidates) with noise measured "
                  "on every rung (its best recipe re-trained with 2 more seeds), so a candidate "
                  "tied with the last promoted one within that noise climbs with it; compute "
                  "counts the re-runs:", "",
                  "| seed | trainings per rung | noise re-runs | ratio | ratio less the top "
                  "rung's re-runs | ladder's answer | best of all at the top | gap | reached | "
                  "same recipe |", "|---" * 10 + "|"]
        for s in a2:
            lines.append(f"| {s['seed']} | {s['trainings']} | {s['noise_reruns']} | "
                         f"**{s['ratio']:.2f}** | {s['ratio_no_top_noise']:.2f} | "
                         f"{s['answer']:.3f} | {s['alltop_best']:.3f} | "
                         f"{s['gap']:+.3f} | {'yes' if s['reached'] else 'no'} | "
                         f"{'yes' if s['same_candidate'] else 'no'} |")
    if a and a2:
        r1 = [s["ratio"] for s in a]
        r2 = [s["ratio"] for s in a2]
        lines += ["", f"- Target ≤ 1/3: the plain ladder spends {min(r1):.2f}–{max(r1):.2f} and "
                  f"reaches the top's quality in {sum(s['reached'] for s in a)}/{len(a)} seeds; "
                  "a miss comes from one comparison inside the noise deciding the single top "
                  "slot. Measuring the noise on every rung keeps such ties together and reaches "
                  f"it in {sum(s['reached'] for s in a2)}/{len(a2)}, at {min(r2):.2f}–"
                  f"{max(r2):.2f} (re-runs and tied candidates cost compute): at this proxy "
                  "size one training's noise is as large as the gaps between good candidates. "
                  "The top rung's own re-runs decide no promotion (no rung is above it): the "
                  "same runs without them — what `[ladder] top_noise = false` runs — cost "
                  f"{min(s['ratio_no_top_noise'] for s in a2):.2f}–"
                  f"{max(s['ratio_no_top_noise'] for s in a2):.2f} (counted from these runs; "
                  "the promotions and the answer are the same)."]
    if not data.get("sweep"):
        return lines + [""]
    b = summary_b(data)
    lines += ["", "### µP vs standard parametrization: the best lr across widths", "",
              f"The same {len(cfg['lrs'])} learning rates "
              f"({', '.join(f'{x:g}' for x in cfg['lrs'])}) at each width, seed 0, batch 16, "
              "warmup 0.05.", "",
              "| parametrization | best lr per width | shift, smallest → largest | Spearman ρ of "
              "the lr ranking between consecutive widths |", "|---|---|---|---|"]
    for key, label in (("mup", f"µP (base {w[0]})"), ("sp", "standard")):
        r = b[key]
        best = ", ".join(f"{x}: {r['best_lr'][x]:g}" for x in r["best_lr"])
        rho = ", ".join(f"{k}: {v:+.2f}" for k, v in r["rho"].items())
        lines.append(f"| {label} | {best} | {r['shift_decades']:+.2f} decades | {rho} |")
    mu, sp = b["mup"], b["sp"]
    lines += ["", f"- With µP the best lr moves {mu['shift_decades']:+.2f} decades from width "
              f"{w[0]} to {w[-1]} and the lr ranking carries over (ρ "
              + ", ".join(f"{v:+.2f}" for v in mu["rho"].values())
              + f"); without it the best lr moves {sp['shift_decades']:+.2f} decades and the "
              "ranking decays (ρ " + ", ".join(f"{v:+.2f}" for v in sp["rho"].values())
              + "): what `[ladder] mup = true` (the default) is for.",
              "", f"![val_loss vs lr per width]({PNG})", ""]
    return lines


def write_results(lines: list[str], heading: str = HEADING) -> None:
    from benchmarks.results_md import write_section

    write_section(heading, "\n".join(lines).rstrip())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", action="store_true", help="no trainings: JSON -> RESULTS.md")
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--wide", action="store_true", help="part A at widths 32 -> 256 (own JSON)")
    a = p.parse_args(argv)
    if a.wide:
        data = campaign(OUT_WIDE, WIDE) if not a.results else json.loads(OUT_WIDE.read_text())
        lines = results_lines(data, out=OUT_WIDE, command="nice -n 15 python "
                              "benchmarks/bench_ladder.py --wide")
        write_results(lines, HEADING_WIDE)
        print("\n".join(lines))
        return 0
    if a.smoke:
        path = Path(tempfile.mkdtemp(prefix="moetune-ladder-smoke-")) / "smoke.json"
        data = campaign(path, SMOKE)
        print(json.dumps([summary_a(r) for r in data["seeds"].values()], indent=1))
        print(json.dumps(summary_b(data), indent=1, default=str))
        plot(data, summary_b(data), path.with_suffix(".png"))
        print("\n".join(results_lines(data)))
        return 0
    data = campaign(OUT, CONFIG) if not a.results else json.loads(OUT.read_text())
    plot(data, summary_b(data), HERE / PNG)
    write_results(results_lines(data))
    print("\n".join(results_lines(data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
