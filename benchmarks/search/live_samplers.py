"""The sampler comparison on REAL trainings: the default (``sampler = "auto"``) vs random search.

The surrogate replays (compare.py) chose the default on an interpolation of recorded runs; this
checks the verdict with real studies through the product's own path: a spec table validated by
`tuner.study.specs.spec.spec_from_dict` (``parse_spec`` + ``check_inputs``, what ``moetune submit``
runs) and `tuner.study.run.runner.run_study`, the `debug` proxy on the stdlib corpus.

Per space × method × seed one study: the same ``n_trials`` × ``tokens_per_trial`` for every
study (no pruning, so every trial trains its full budget: equal tokens), 2 trials at once, one
core each, objective val_loss alone (minimised; the same for the same recipe and model seed
however busy the machine is, unlike tokens/s). Spaces: the ``[space]`` of
search_spaces/quickstart.toml (read at run time; its knobs are recorded) and
search_spaces/deepseek_v3.toml (conditional knobs, so "auto" is TPE there; fp8 is EMULATED on
a CPU and slower than bf16). ``study.seed`` seeds both the sampler and the model's weights.

Noise band: each study sets ``[study] noise_repeats = 2, noise_top = 1``, so
`tuner.study.results.noise` re-trains its best recipe with the 2 next model seeds after the trials;
the groups of all studies of a space give one pooled sd of val_loss
(`tuner.study.results.noise.pooled_sd`), and a difference between methods within it is a tie
(`tuner.study.results.noise.tied`). The same re-runs give each study's best recipe a mean over 3
seeds, free of the winner's curse of a best-of-n.

For the quickstart space the surrogate is also replayed at the same budget (compare.py's
replay, 10 seeds), so its verdict and the real one sit side by side.

Each finished study is written to live_samplers.json at once; a rerun skips the finished ones.
Every study of a space runs the space its first finished study ran (recorded in the JSON), so
an edit of quickstart.toml in the middle of a campaign does not mix two spaces; a study found on
another space is run again.

    nice -n 15 python benchmarks/search/live_samplers.py         # the campaign (2 cores)
    python benchmarks/search/live_samplers.py --only quickstart/auto/0  # one study, to size it
    python benchmarks/search/live_samplers.py --results          # JSON -> PNG + RESULTS.md
    python benchmarks/search/live_samplers.py --smoke            # 2 short trials, tmp JSON
    nice -n 15 python benchmarks/search/live_samplers.py --campaign quickstart-now
        # the quickstart's space as the file holds it now, alone, in its own JSON and subsection
        # (the first campaign's quickstart studies are pinned to the space they ran)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

OUT = HERE / "live_samplers.json"
PNG = "live_samplers_best_vs_tokens.png"
RESULTS = HERE.parent / "RESULTS.md"
SECTION = "## Search efficiency"
HEADING = "### Samplers on real trainings (measured)"
COMMAND = "nice -n 15 python benchmarks/search/live_samplers.py"
SPACES = ("quickstart", "deepseek_v3")
METHODS = ("auto", "random")
LABELS = {"auto": "default (sampler auto)", "random": "random"}
FRACTIONS = (0.25, 0.5, 1.0)
# does the default beat random beyond the noise: in both the best val_loss seen and the recipes'
# re-trained means (yes), in one of them (partly), in neither (no)
OVERALL = {"yes": "yes", "partly": "only partly", "no": "no"}
# The campaign's settings, sized from one measured study (16 × 60k tokens, 2 at once: 141 s at
# load average ~7 on 2 cores, so 12 studies fit ~40 min). 60k tokens per trial is the recorded
# grid's budget, so the surrogate replays the very same trial length.
CONFIG: dict[str, Any] = {
    "n_trials": 16, "tokens_per_trial": 60_000, "eval_every_tokens": 30_000,
    "max_concurrent": 2, "cpus_per_trial": 1, "preset": "debug", "corpus": "stdlib",
    "noise_repeats": 2, "noise_top": 1, "seeds": [0, 1, 2]}
SMOKE = CONFIG | {"n_trials": 2, "tokens_per_trial": 2_048, "eval_every_tokens": 1_024,
                  "noise_repeats": 1, "seeds": [0]}
SURROGATE_SEEDS = 10


def space_table(space: str, pinned: dict[str, Any] | None = None
                ) -> tuple[dict[str, Any], Path | None]:
    """The ``[space]`` table of a study over ``space``, and the base dir it resolves against:
    ``pinned`` (the space the campaign's earlier studies of it ran), else quickstart's inline
    space as the file holds it now, or the deepseek_v3 space file."""
    if pinned is not None:
        return pinned, None
    if space == "quickstart":
        text = (ROOT / "search_spaces" / "quickstart.toml").read_text()
        return tomllib.loads(text)["space"], None
    return {"file": f"{space}.toml"}, ROOT / "search_spaces"


def spec_table(space: str, method: str, seed: int, cfg: dict[str, Any],
               pinned: dict[str, Any] | None = None) -> tuple[dict, Any]:
    table, base = space_table(space, pinned)
    return {
        "study": {"name": f"live-{space}-{method}-s{seed}", "n_trials": cfg["n_trials"],
                  "max_concurrent": cfg["max_concurrent"], "seed": seed, "sampler": method,
                  "noise_repeats": cfg["noise_repeats"], "noise_top": cfg["noise_top"]},
        "model": {"preset": cfg["preset"]},
        "data": {"corpus": cfg["corpus"]},
        "budget": {"tokens_per_trial": cfg["tokens_per_trial"],
                   "eval_every_tokens": cfg["eval_every_tokens"]},
        "objectives": {"val_loss": "minimize"},
        "pruning": {"scheduler": "none"},
        "resources": {"cpus_per_trial": cfg["cpus_per_trial"]},
        "space": table,
    }, base


def run_one(space: str, method: str, seed: int, cfg: dict[str, Any], root: Path,
            pinned: dict[str, Any] | None = None) -> dict[str, Any]:
    """One real study; its record (every trial, best val_loss by tokens, the noise re-runs).
    ``pinned``: the space to use instead of the file's (see `pinned_space`)."""
    from trainers.result import to_float
    from tuner.study.results.trial_record import trial_records
    from tuner.study.run.runner import run_study
    from tuner.study.specs.spec import spec_from_dict
    from tuner.study.store import records
    from tuner.study.trial.samplers import resolve_sampler_name, startup_trials

    table, base = spec_table(space, method, seed, cfg, pinned)
    spec = spec_from_dict(table, base_dir=base)
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    summary = run_study(spec, run_dir=root / spec.name, progress=False)
    wall = time.perf_counter() - t0
    study = summary.study
    frozen = {t.number: t for t in study.get_trials(deepcopy=False)}
    recs = sorted(trial_records(study), key=lambda r: (frozen[r.number].datetime_complete
                                                       or frozen[r.number].datetime_start,
                                                       r.number))
    trials, best, curve = [], math.inf, []
    for k, r in enumerate(recs, 1):
        loss = to_float(r.metrics.get("val_loss"))
        if r.feasible and math.isfinite(loss):
            best = min(best, loss)
        trials.append({"number": r.number, "state": r.state.name, "feasible": r.feasible,
                       "val_loss": round(loss, 6) if math.isfinite(loss) else str(loss),
                       "params": r.params, "duration_s": round(r.duration_s, 2),
                       "reason": r.reason})
        curve.append([k * cfg["tokens_per_trial"], round(best, 6) if math.isfinite(best)
                      else None])
    first = min(t.datetime_start for t in frozen.values() if t.datetime_start)
    last = max(t.datetime_complete for t in frozen.values() if t.datetime_complete)
    return {"space": space, "method": method, "seed": seed,
            "sampler": resolve_sampler_name(spec), "startup_trials": startup_trials(spec),
            "knobs": list(spec.space.names()), "conditional": spec.space.has_conditions(),
            "space_def": spec.space.to_dict(),
            "trials": trials, "best_curve": curve,
            "noise": study.user_attrs.get(records.NOISE),
            "wall_s": round(wall, 1), "trial_span_s": round((last - first).total_seconds(), 1),
            "load_avg_before": [round(x, 2) for x in load_before],
            "load_avg_after": [round(x, 2) for x in os.getloadavg()],
            "date": time.strftime("%Y-%m-%d %H:%M")}


def _machine() -> dict[str, Any]:
    import torch

    return {"platform": platform.platform(), "machine": platform.machine(),
            "cores": os.cpu_count(), "torch": torch.__version__,
            "python": platform.python_version()}


def pinned_space(studies: dict[str, Any], space: str) -> dict[str, Any] | None:
    """The space the campaign's first finished study of ``space`` ran: every later one runs
    the same, even when its file changes in between (None: none yet)."""
    done = sorted((r["date"], k) for k, r in studies.items() if r["space"] == space)
    return studies[done[0][1]]["space_def"] if done else None


def campaign(path: Path, cfg: dict[str, Any], only: list[str] | None, command: str, *,
             fresh: bool = False) -> dict:
    """Run every missing study of ``cfg`` (or only the keys in ``only``), saving after each.
    ``fresh``: ignore the studies ``path`` holds (it is replaced once the first study ends)."""
    import logging

    import ray

    data = json.loads(path.read_text()) if path.exists() and not fresh else {}
    # the seeds may grow (studies are keyed by seed); every other setting must match
    if data and {**data.get("config", {}), "seeds": None} != {**cfg, "seeds": None}:
        raise SystemExit(f"{path}: holds studies of another configuration "
                         f"({data.get('config')}), not {cfg}; pass --fresh to start afresh.")
    data.setdefault("what", "sampler comparison on real trainings (measured)")
    data["config"], data["command"] = cfg, command
    data.setdefault("machine", _machine())
    studies: dict[str, Any] = data.setdefault("studies", {})
    keys = [f"{s}/{m}/{seed}" for s in SPACES for seed in cfg["seeds"] for m in METHODS]
    for k in [k for k, r in studies.items()
              if r["space_def"] != pinned_space(studies, r["space"])]:
        print(f"{k}: ran another {k.split('/')[0]} space than the campaign's first study of "
              "it (its file changed in between); running it again on that one", flush=True)
        del studies[k]
    todo = [k for k in keys if k not in studies and (not only or k in only)]
    if not todo:
        return data
    root = Path(tempfile.mkdtemp(prefix="moetune-live-samplers-"))
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    ray.init(include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
    try:
        for key in todo:
            space, method, seed = key.split("/")
            print(f"{key}: running", flush=True)
            rec = run_one(space, method, int(seed), cfg, root,
                          pinned_space(studies, space))
            studies[key] = rec
            path.write_text(json.dumps(data, indent=1) + "\n")
            print(f"{key}: best val_loss {rec['best_curve'][-1][1]}, {rec['sampler']}, "
                  f"{rec['wall_s']} s", flush=True)
    finally:
        ray.shutdown()
    return data


# ---- analysis ----------------------------------------------------------------------------

def best_at(rec: dict[str, Any], fraction: float) -> float:
    """Best val_loss once ``fraction`` of the study's tokens were spent (trials in the order
    they finished)."""
    curve = rec["best_curve"]
    k = max(1, round(fraction * len(curve)))
    v = curve[k - 1][1]
    return math.inf if v is None else float(v)


def noise_groups(rec: dict[str, Any]) -> list[list[float]]:
    """Each noise-measured recipe: its trial's val_loss and its re-runs (other model seeds)."""
    noise = rec.get("noise") or {}
    by_number = {t["number"]: t for t in rec["trials"]}
    groups = []
    for number in noise.get("trials", []):
        own = by_number[number]["val_loss"]
        runs = [float(x["val_loss"]) for x in noise.get("runs", []) if x["trial"] == number]
        groups.append([float(own)] + runs)
    return groups


def summarise(data: dict[str, Any]) -> dict[str, Any]:
    """Per space: per method the best val_loss at each fraction of the tokens over seeds, the
    pooled noise sd, the recipe means over seeds, and the verdict."""
    from tuner.study.results.noise import pooled_sd, tied

    out: dict[str, Any] = {}
    for space in SPACES:
        recs = {m: [r for r in data["studies"].values()
                    if r["space"] == space and r["method"] == m] for m in METHODS}
        if not all(recs.values()):
            continue
        groups = [g for rs in recs.values() for r in rs for g in noise_groups(r)]
        sd = pooled_sd(groups)
        s: dict[str, Any] = {"noise_sd": sd, "noise_runs": sum(len(g) for g in groups),
                             "noise_recipes": len(groups), "methods": {},
                             "trial_s": _trial_seconds([r for rs in recs.values() for r in rs])}
        for m, rs in recs.items():
            rs = sorted(rs, key=lambda r: r["seed"])
            at = {str(f): [best_at(r, f) for r in rs] for f in FRACTIONS}
            means = [float(np.mean([x for x in g if math.isfinite(x)]))
                     for r in rs for g in noise_groups(r)[:1]]
            s["methods"][m] = {
                "sampler": sorted({r["sampler"] for r in rs}),
                "startup_trials": sorted({r["startup_trials"] for r in rs}),
                "seeds": [r["seed"] for r in rs], "best_at": at,
                "best_recipe_mean": means,
                "wall_s": [r["wall_s"] for r in rs],
                "fp8_share": float(np.mean([t["params"].get("precision") == "fp8"
                                            for r in rs for t in r["trials"]])),
                "failed": sum(not t["feasible"] for r in rs for t in r["trials"])}
        a, b = s["methods"]["auto"], s["methods"]["random"]
        fa, fb = float(np.median(a["best_at"]["1.0"])), float(np.median(b["best_at"]["1.0"]))
        s["median_gap"] = fb - fa  # > 0: the default ends lower (better)
        paired = [(x, y) for x, y in zip(a["best_at"]["1.0"], b["best_at"]["1.0"], strict=True)]
        s["paired"] = {"auto_better": sum(x < y and not tied(x, y, sd) for x, y in paired),
                       "tied": sum(tied(x, y, sd) for x, y in paired),
                       "random_better": sum(y < x and not tied(x, y, sd) for x, y in paired)}
        s["verdict"] = ("tie" if tied(fa, fb, sd) else "default better" if fa < fb
                        else "random better")
        ma, mb = float(np.median(a["best_recipe_mean"])), float(np.median(b["best_recipe_mean"]))
        s["mean_gap"] = mb - ma
        s["mean_verdict"] = ("tie" if tied(ma, mb, sd) else "default better" if ma < mb
                             else "random better")
        wins = [s["verdict"], s["mean_verdict"]].count("default better")
        s["overall"] = {2: "yes", 1: "partly", 0: "no"}[wins]
        out[space] = s
    return out


def _trial_seconds(recs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median trial wall time by precision and fp8's share of all trial time (wall times
    depend on the machine's load; fp8 is emulated on a CPU)."""
    dur: dict[str, list[float]] = {}
    for r in recs:
        for t in r["trials"]:
            dur.setdefault(t["params"].get("precision", "bf16"), []).append(t["duration_s"])
    total = sum(sum(v) for v in dur.values())
    return {"median": {k: float(np.median(v)) for k, v in sorted(dur.items())},
            "fp8_share_of_time": sum(dur.get("fp8", [])) / total if total else math.nan,
            "fp8_share_of_trials": len(dur.get("fp8", [])) / max(1, sum(map(len, dur.values())))}


def surrogate_same_budget(cfg: dict[str, Any], seeds: int = SURROGATE_SEEDS) -> dict[str, Any]:
    """compare.py's replay of the default and random at this campaign's budget, val_loss alone,
    on the surrogate (an interpolation of recorded runs: no new trainings)."""
    from benchmarks.search import compare as cp
    from benchmarks.search.surrogate import LABEL, Surrogate

    methods = [m for m in cp.METHODS + cp.VARIANTS if m[0] in ("auto_default", "random")]
    n = cfg["n_trials"]
    res = cp.run_methods(Surrogate.load(), methods, range(seeds),
                         token_budget=n * cp.BUDGET, objectives=("val_loss",), n_trials=n)
    out: dict[str, Any] = {"label": LABEL, "seeds": seeds, "n_trials": n,
                           "tokens_per_trial": cp.BUDGET,
                           "space": cp.make_spec(sampler="random", scheduler="none",
                                                 seed=0).space.to_dict(), "methods": {}}
    for key, m in (("auto_default", "auto"), ("random", "random")):
        runs = res[key]
        out["methods"][m] = {
            "sampler": runs[0]["sampler"],
            "best_at": {str(f): [float(r["best"][max(1, round(f * len(r["best"]))) - 1][2])
                                 for r in runs] for f in FRACTIONS},
            "median_curve": [[int(np.median([r["best"][i][1] for r in runs])),
                              float(np.median([r["best"][i][2] for r in runs]))]
                             for i in range(min(len(r["best"]) for r in runs))]}
    return out


# ---- figure and RESULTS.md ---------------------------------------------------------------

def plot(data: dict[str, Any], summary: dict[str, Any], path: Path) -> None:
    from matplotlib.figure import Figure

    spaces = [s for s in SPACES if s in summary]
    fig = Figure(figsize=(6 * max(1, len(spaces)), 4.6))
    colors = {"auto": "tab:blue", "random": "tab:orange"}
    for i, space in enumerate(spaces):
        ax = fig.add_subplot(1, len(spaces), i + 1)
        sd = summary[space]["noise_sd"]
        for m in METHODS:
            rs = [r for r in data["studies"].values() if r["space"] == space
                  and r["method"] == m]
            curves = np.array([[np.nan if v is None else v for _, v in r["best_curve"]]
                               for r in rs], float)
            x = np.array([t for t, _ in rs[0]["best_curve"]]) / 1e6
            for c in curves:
                ax.plot(x, c, color=colors[m], alpha=0.3, lw=0.8)
            med = np.nanmedian(curves, axis=0)
            sampler = "/".join(summary[space]["methods"][m]["sampler"])
            ax.plot(x, med, color=colors[m], lw=2.2, marker=".",
                    label=f"{LABELS[m]} ({sampler}), median of {len(rs)} seeds")
            if math.isfinite(sd):
                ax.fill_between(x, med - sd, med + sd, color=colors[m], alpha=0.12)
        sur = data.get("surrogate", {})
        if space == "quickstart" and sur:
            for m in METHODS:
                c = np.array(sur["methods"][m]["median_curve"], float)
                ax.plot(c[:, 0] / 1e6, c[:, 1], color=colors[m], ls="--",
                        lw=1.2, label=f"{LABELS[m]}: SURROGATE median of {sur['seeds']} seeds")
        ax.set_xlabel("training tokens spent by the study (M)")
        ax.set_ylabel("best val_loss so far (measured)")
        ax.set_title(f"{space}: real trainings; band = ±noise sd {sd:.3f}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Default vs random on real debug-proxy trainings (measured; fp8 emulated on "
                 "CPU)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def _cell(xs: list[float]) -> str:
    return f"{np.median(xs):.3f} [{min(xs):.3f}, {max(xs):.3f}]"


def _surrogate_verdict() -> str:
    """The existing subsections' verdict, from the surrogate replay files they are written
    from (val_loss alone, 40 trials)."""
    path = HERE / "asha.json"
    if not path.exists():
        return "the surrogate's val_loss-alone replay (asha.json) is not on record here"
    c = json.loads(path.read_text())
    a, r = c["methods"]["auto_default"], c["methods"]["random"]
    return (f"on the surrogate (val_loss alone, {c['n_trials']} trials of "
            f"{c['token_budget'] // c['n_trials']:,} tokens, {c['seeds']} seeds) the default "
            f"({a['sampler']}, {a['startup_trials']} random start trials) ends at median best "
            f"val_loss {a['best_val_loss']['median']:.3f} against random's "
            f"{r['best_val_loss']['median']:.3f} and reaches random's final best with "
            f"{a['tokens_to_random_hv']['median'] / r['tokens_total']['median']:.2f}× of its "
            "tokens")


def results_lines(data: dict[str, Any], summary: dict[str, Any]) -> list[str]:
    cfg = data["config"]
    st = data["studies"]
    mach = data["machine"]
    walls = [r["wall_s"] for r in st.values()]
    loads = [r["load_avg_after"][0] for r in st.values()]
    dates = sorted(r["date"] for r in st.values())
    by_space = {s: sum(r["wall_s"] for r in st.values() if r["space"] == s) for s in SPACES}
    qs = next((r for r in st.values() if r["space"] == "quickstart"), None)
    when = dates[0][:10] if dates[0][:10] == dates[-1][:10] else (
        f"{dates[0][:10]} to {dates[-1][:10]}")
    lines = [
        f"Measured {when} with real trainings, no surrogate. Command: "
        f"`{data['command']}` (resumable: each finished study is saved at once); data: "
        f"[`search/{OUT.name}`](search/{OUT.name}) (every trial's params and "
        f"val_loss, the best after each trial, the noise re-runs). Each study: `debug` proxy, "
        f"stdlib corpus, {cfg['n_trials']} trials × {cfg['tokens_per_trial']:,} tokens "
        f"= {cfg['n_trials'] * cfg['tokens_per_trial'] / 1e6:.2f} M tokens (equal for every "
        f"study: no pruning), {cfg['max_concurrent']} trials at once on "
        f"{cfg['cpus_per_trial']} core each, objective val_loss alone, through "
        "`tuner.study.run.runner.run_study` with a spec validated like `moetune submit`'s; seeds "
        f"{', '.join(map(str, cfg['seeds']))} (`[study] seed`: the sampler's and the model's). "
        f"Machine: {mach['machine']}, {mach['cores']} cores shared with other work (load "
        f"average {min(loads):.1f}–{max(loads):.1f} at the studies' ends), torch "
        f"{mach['torch']}, `nice -n 15`; val_loss does not depend on the load, the wall times "
        f"do: {sum(walls) / 60:.0f} min in all ("
        + ", ".join(f"{s} {by_space[s] / 60:.0f} min" for s in SPACES)
        + ")." + _fp8_sentence(summary),
        "",
        "- Spaces (every study of a space ran the same one, pinned from the campaign's first "
        "study of it): " + "; ".join(_space_line(sp, st) for sp in summary) + ".",
        f"- Noise band: every study re-trained its best recipe with {cfg['noise_repeats']} "
        "other model seeds (`[study] noise_repeats`, `tuner.study.results.noise`); the pooled "
        "sd of "
        "val_loss over those groups, per space, is the band: a difference within it is a tie "
        "(`tuner.study.results.noise.tied`). \"Best recipe, mean of 3 seeds\" is each "
        "study's best "
        "recipe averaged over its own and the re-run seeds: free of the winner's curse of a "
        "best-of-n.",
        "",
        "| space | method | best val_loss at 25% of the tokens | at 50% | at 100% "
        "| best recipe, mean of 3 seeds | noise sd (runs) |",
        "|---|---|---|---|---|---|---|",
    ]
    for space, s in summary.items():
        for m in METHODS:
            ms = s["methods"][m]
            samp = "/".join(ms["sampler"]).upper()
            start = "/".join(map(str, ms["startup_trials"]))
            how = ("random" if m == "random" else
                   f"default: `auto` → {samp}, {start} random start trials")
            lines.append(
                f"| {space} | {how} | {_cell(ms['best_at']['0.25'])} | "
                f"{_cell(ms['best_at']['0.5'])} | {_cell(ms['best_at']['1.0'])} | "
                f"{_cell(ms['best_recipe_mean'])} | {s['noise_sd']:.3f} ({s['noise_runs']}) |")
    lines += ["", "Cells: median [min, max] over the seeds (measured).", ""]
    sur = data.get("surrogate")
    if sur:
        a, r = sur["methods"]["auto"], sur["methods"]["random"]
        which = (", the same knobs and ranges as measured"
                 if qs is not None and same_space(sur["space"], qs["space_def"])
                 else ", as compare.py defines it: NOT the measured one")
        lines += [
            f"Surrogate at the same budget (quickstart space{which}; "
            f"{sur['n_trials']} trials × {sur['tokens_per_trial']:,} tokens, val_loss alone, "
            f"{sur['seeds']} seeds; {sur['label']}): default ({a['sampler']}) "
            f"{_cell(a['best_at']['1.0'])}, random {_cell(r['best_at']['1.0'])} best val_loss "
            f"at 100% (at 50%: {_cell(a['best_at']['0.5'])} vs {_cell(r['best_at']['0.5'])}).",
            ""]
    lines += ["Does the default beat random beyond the noise (real runs)?", ""]
    word = {"tie": "**a tie within the noise**",
            "default better": "**the default lower beyond the noise**",
            "random better": "**random lower beyond the noise**"}
    for space, s in summary.items():
        a, r = s["methods"]["auto"], s["methods"]["random"]
        p, n = s["paired"], len(a["seeds"])
        med = {k: {m: float(np.median(s["methods"][m]["best_at"][k])) for m in METHODS}
               for k in ("0.5", "1.0")}
        ma, mr = np.median(a["best_recipe_mean"]), np.median(r["best_recipe_mean"])
        lines.append(
            f"- **{space}** ({OVERALL[s['overall']]}; the default is "
            f"{'/'.join(a['sampler']).upper()} here): best val_loss seen after all tokens, "
            f"median {med['1.0']['auto']:.3f} vs {med['1.0']['random']:.3f} (random), gap "
            f"{s['median_gap']:+.3f} against a noise sd of {s['noise_sd']:.3f}: "
            f"{word[s['verdict']]}; seed by seed (the same seed gives both the same model "
            f"init and the same random start trials) the default lower beyond the noise in "
            f"{p['auto_better']}/{n}, tied in {p['tied']}/{n}, random lower in "
            f"{p['random_better']}/{n}. The recipes found, re-trained over 3 seeds: {ma:.3f} vs "
            f"{mr:.3f}, {word[s['mean_verdict']]}"
            + (" (part of the best-seen gap is the winner's curse of keeping the best of 16 "
               "noisy runs)" if s["verdict"] != s["mean_verdict"] else "")
            + f". At 50% of the tokens: {med['0.5']['auto']:.3f} vs {med['0.5']['random']:.3f}.")
    lines += [
        f"- The surrogate's verdict (subsections above): {_surrogate_verdict()}. "
        + _agreement(summary, sur),
        f"- Caveat: {len(SPACES) * len(METHODS) * len(cfg['seeds'])} studies of "
        f"{cfg['n_trials']} trials are few; with {len(cfg['seeds'])} seeds per method the "
        "median and range say whether a gap is larger than the noise, not its size to a "
        "second digit.",
        "",
        f"![best val_loss vs tokens, real trainings](search/{PNG})",
    ]
    return lines


def _fp8_sentence(summary: dict[str, Any]) -> str:
    with_fp8 = [sp for sp in summary if summary[sp]["trial_s"]["fp8_share_of_trials"] > 0]
    if not with_fp8:
        return " No space here searches fp8."
    return (" fp8 is EMULATED on the CPU, so fp8 trials take longer (median trial wall time, "
            + "; ".join(f"{sp}: bf16 {summary[sp]['trial_s']['median'].get('bf16', math.nan):.0f}"
                        f" s, fp8 {summary[sp]['trial_s']['median'].get('fp8', math.nan):.0f} s, "
                        f"fp8 {summary[sp]['trial_s']['fp8_share_of_trials']:.0%} of the trials "
                        f"and {summary[sp]['trial_s']['fp8_share_of_time']:.0%} of the trial time"
                        for sp in with_fp8)
            + "); their val_loss is the emulation's.")


def same_space(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two space tables search the same knobs over the same ranges with the same fixed
    values (a fixed value equal to the `Recipe` default counts as unset)."""
    import dataclasses

    from trainers import Recipe

    defaults = dataclasses.asdict(Recipe())

    def fixed(t: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in t.get("fixed", {}).items() if defaults.get(k, object()) != v}

    return a.get("params") == b.get("params") and fixed(a) == fixed(b)


def _space_line(space: str, studies: dict[str, Any]) -> str:
    """The knobs a space's studies searched, its conditional ones, what ``auto`` became, and
    whether its file still holds that space."""
    rec = next(r for r in studies.values() if r["space"] == space)
    auto = next(r for r in studies.values() if r["space"] == space and r["method"] == "auto")
    params = rec["space_def"].get("params", {})
    cond = [k for k, v in params.items() if isinstance(v, dict) and "when" in v]
    fixed = rec["space_def"].get("fixed", {})
    now, base = space_table(space)
    if base is not None:
        now = tomllib.loads((base / now["file"]).read_text())
    src = ("the `[space]` of search_spaces/quickstart.toml" if space == "quickstart"
           else f"search_spaces/{space}.toml")
    return (f"**{space}** = {src}: " + ", ".join(f"`{k}`" for k in rec["knobs"])
            + (f" (conditional: {', '.join(f'`{k}`' for k in cond)})" if cond else
               " (none conditional)")
            + f", fixed {', '.join(f'{k} = {v}' for k, v in fixed.items())}; `auto` is "
            f"{auto['sampler'].upper()} here"
            + ("" if now == rec["space_def"] else
               f" (the file's space has changed since: it now searches "
               f"{', '.join(f'`{k}`' for k in now.get('params', {}))}; these results are for "
               "the knobs listed here)"))


def _agreement(summary: dict[str, Any], sur: dict[str, Any] | None) -> str:
    """How far the surrogate's verdict (the default beats random) holds on real runs."""
    text = ""
    if sur and "quickstart" in summary:
        a, r = sur["methods"]["auto"], sur["methods"]["random"]
        gap = np.median(r["best_at"]["1.0"]) - np.median(a["best_at"]["1.0"])
        q = summary["quickstart"]
        text += (f"At this campaign's budget the surrogate (noise-free) predicts a gap of "
                 f"{gap:+.3f} on the quickstart space; the real runs show {q['median_gap']:+.3f}"
                 f" in best val_loss seen ({q['verdict']}) and {q['mean_gap']:+.3f} in the "
                 f"recipes' re-trained means ({q['mean_verdict']}), against a noise sd of "
                 f"{q['noise_sd']:.3f} for one run: the direction holds, but the margin the "
                 "surrogate predicts is about one run's noise, so real studies of this size "
                 "resolve it only in part. ")
    elif "quickstart" in summary:
        text += ("The surrogate has no replay of this space: its grid of recorded runs varies "
                 "none of its systems knobs (batch size, fp32, recompute). ")
    if "deepseek_v3" in summary:
        d = summary["deepseek_v3"]
        text += (f"deepseek_v3: {d['verdict']} in best val_loss seen, {d['mean_verdict']} in "
                 "the re-trained means; the surrogate never covered this space (its grid has "
                 "the quickstart knobs only), so `auto`'s choice of TPE here rested on GP's "
                 "handling of conditional knobs, not on a replay.")
    return text.strip()


def write_results(lines: list[str]) -> None:
    """Replace (or insert) this subsection inside "## Search efficiency" of RESULTS.md, before
    "### Parallel efficiency" when that exists."""
    text = RESULTS.read_text()
    block = HEADING + "\n\n" + "\n".join(lines).rstrip() + "\n\n"
    own = re.compile(rf"^{re.escape(HEADING)}\n.*?(?=^### |^## |\Z)", re.S | re.M)
    if own.search(text):
        text = own.sub(lambda _: block, text, count=1)
    else:
        sec = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M).search(text)
        if sec is None:
            raise SystemExit(f"{RESULTS}: has no {SECTION!r} section to add to")
        body = sec.group(0)
        at = body.find("### Parallel efficiency")
        at = at if at >= 0 else len(body)
        body = body[:at].rstrip() + "\n\n" + block + body[at:].lstrip("\n")
        text = text[:sec.start()] + body + text[sec.end():]
    RESULTS.write_text(text.rstrip() + "\n")


def report(path: Path, *, results: bool) -> dict[str, Any]:
    data = json.loads(path.read_text())
    summary = summarise(data)
    if "quickstart" in summary and "surrogate" not in data:
        data["surrogate"] = surrogate_same_budget(data["config"]) if SURROGATE else {}
        path.write_text(json.dumps(data, indent=1) + "\n")
    data["summary"] = summary
    path.write_text(json.dumps(data, indent=1) + "\n")
    if summary:
        plot(data, summary, path.parent / (path.stem + "_best_vs_tokens.png"))
    if results and summary:
        write_results(results_lines(data, summary))
    return summary


# Later campaigns, each in its own JSON and subsection: name -> (spaces, heading).
# The surrogate's grid holds the first quickstart space's knobs only, so later campaigns of
# other knobs have no replay beside them.
CAMPAIGNS = {
    "quickstart-now": (("quickstart",),
                       "### Samplers on real trainings: the quickstart's current space "
                       "(measured)"),
}
SURROGATE = True


def _use_campaign(name: str) -> None:
    global OUT, PNG, HEADING, SPACES, COMMAND, SURROGATE
    SPACES, HEADING = CAMPAIGNS[name]
    SURROGATE = False
    OUT = HERE / f"live_samplers_{name}.json"
    PNG = f"{OUT.stem}_best_vs_tokens.png"
    COMMAND = f"nice -n 15 python benchmarks/search/live_samplers.py --campaign {name}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="", help="comma-separated SPACE/METHOD/SEED keys to run")
    p.add_argument("--results", action="store_true",
                   help="no trainings: summarise the JSON into the PNG and RESULTS.md")
    p.add_argument("--fresh", action="store_true",
                   help="run every study again instead of resuming live_samplers.json")
    p.add_argument("--smoke", action="store_true",
                   help="2 trials of 2,048 tokens, seed 0, into a temporary JSON")
    p.add_argument("--campaign", choices=sorted(CAMPAIGNS), default="",
                   help="another campaign: its own JSON, spaces and RESULTS.md subsection")
    a = p.parse_args(argv)
    if a.campaign:
        _use_campaign(a.campaign)
    valid = {f"{s}/{m}/{seed}" for s in SPACES for m in METHODS for seed in CONFIG["seeds"]}
    only = [k for k in a.only.split(",") if k]
    if bad := sorted(set(only) - valid):
        p.error(f"--only: unknown key(s) {bad}; valid: SPACE/METHOD/SEED with SPACE in "
                f"{SPACES}, METHOD in {METHODS}, SEED in {CONFIG['seeds']}")
    if a.smoke:
        path = Path(tempfile.mkdtemp(prefix="moetune-live-samplers-smoke-")) / "smoke.json"
        campaign(path, SMOKE, None, "python benchmarks/search/live_samplers.py --smoke")
        data = json.loads(path.read_text())
        summary = summarise(data)
        plot(data, summary, path.with_suffix(".png"))
        print(json.dumps(summary, indent=1))
        print(f"smoke: {path} and {path.with_suffix('.png')}")
        return 0
    if not a.results:
        campaign(OUT, CONFIG, only or None, COMMAND, fresh=a.fresh)
    summary = report(OUT, results=not only)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
