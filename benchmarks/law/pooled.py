"""Pooled against per-budget law fits, on the same real trainings: which one predicts the
held-out budget's lr* better, and which one's band tells the truth?

Each seed runs the fitted budgets of the one-batch mode's real design (debug proxy, fp32,
one batch, 8 qmc trials at 4,096 / 13,312 / 40,960 / 131,072 tokens) through ``moetune submit``
with no held-out budget; the held-out budget (655,360 tokens) was searched on its own by
the one-batch mode (benchmarks/law.json: its measured lr* per seed). Both fits read the same stored
trials:

- per-budget: each budget's quadratic optimum, then a line through the uncensored optima
  (`tuner.modeling.laws.power_law.fit_power_law`);
- pooled: one surface over every budget's trials whose bowls' bottoms lie on the line
  (`tuner.modeling.laws.pooled_law.fit_pooled_law`).

Beside the real trainings, a simulation with a known law (``--simulate``): 40 synthetic law
studies per noise level, the same design, quadratic bowls narrowing with the budget as measured
here, lr* on an exact power law: how close each fit predicts the held-out lr*, and how often its
95% band covers it.

    nice -n 15 python benchmarks/bench_law.py pooled        # real trainings (~15-35 min)
    nice -n 15 python benchmarks/bench_law.py pooled --tokenizer bpe:32768  # on BPE tokens
    python benchmarks/bench_law.py pooled --results         # refit the stored studies

``--results`` refits the studies found under runs/ (not committed) and keeps, from
benchmarks/law_pooled.json, the rows of those it does not find.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.law.common import (
    BENCH,
    ROOT,
    add_held_out,
    db_path,
    pairs_inside,
    read_json,
    spec_text,
    stored_law_data,
    submit_or_resume,
    write_json,
)
from benchmarks.law.one_batch import REAL

OUT = BENCH / "law_pooled.json"
HEADING = "## Pooled law fit against per-budget optima"

CFG = REAL | {"held_out": 0}
# each corpus' runs: ROOT + suffix (--tokenizer bpe:N runs under ROOT-bpeN)
CORPUS_ROOTS = {"bytes": "", "bpe-8k": "-bpe8192", "bpe-32k": "-bpe32768"}


def run_seed(seed: int, root: Path, tokenizer: str = "", trials: int = REAL["trials"]) -> None:
    """The seed's fitted budgets through ``moetune submit`` (``resume`` when they exist), on
    the byte corpus or, with ``tokenizer`` (``bpe:8192``), on the same text as its tokens;
    ``trials`` qmc trials per budget (a power of 2 keeps one in each 1/n of the lr range)."""
    root.mkdir(parents=True, exist_ok=True)
    name = f"law-s{seed}"
    spec_path = root / f"{name}.toml"
    text = spec_text(CFG | {"trials": trials}, seed)
    if tokenizer:
        text = text.replace("[data]\n", f'[data]\ntokenizer = "{tokenizer}"\n', 1)
    spec_path.write_text(text)
    submit_or_resume(name, spec_path, root)


def run_held_out(seed: int, src: Path, dst: Path, trials: int) -> None:
    """The held-out budget (`REAL`'s, ``trials`` trials after the predicted recipe) of the
    seed's law in ``src``, run through ``moetune resume`` on a copy in ``dst``: the copy's stored
    law spec gains the held-out budget (``held_out``; ``law.trials`` reaches only budgets not yet
    created, i.e. this one), so the product predicts it from the fitted budgets' trials, stores
    the prediction, searches it and writes law.md as for any law study."""
    import shutil

    name = f"law-s{seed}"
    if not db_path(dst, seed).exists():
        (dst / "runs").mkdir(parents=True, exist_ok=True)
        for folder in (src / "runs").glob(f"{name}*"):
            shutil.copytree(folder, dst / "runs" / folder.name)
        shutil.copy(src / f"{name}.toml", dst / f"{name}.toml")
        add_held_out(db_path(dst, seed), name, REAL["held_out"], trials)
    submit_or_resume(name, None, dst)


def held_out_rows(seeds: list[int], root: Path) -> list[dict[str, Any]]:
    """Per seed whose held-out budget ran (`run_held_out`): the product's own law data."""
    rows = []
    for seed in seeds:
        # the stored spec: the copy's, with the held-out budget (the .toml has none)
        data = stored_law_data(seed, root)
        h = data and data["held_out_check"]
        if h is None or not data.get("held_out_in_law"):
            continue
        full = data["full_run"] or {}
        rows.append({"seed": seed, "held_out_check": h, "exponent": data["lr_law"]["exponent"],
                     "exponent_interval": data["lr_law"]["exponent_interval"],
                     "lr_budgets": data["lr_budgets"],
                     "lack_of_fit_p": (data.get("pooled") or {}).get("lack_of_fit_p"),
                     "full_lr": full.get("lr"), "full_band": full.get("lr_band"),
                     "decades_past": full.get("decades_past")})
    return rows


def _fits(lrs: list[Any], losses: list[Any], tokens: list[int], seed: int = 0,
          n_boot: int = 200) -> dict[str, Any]:
    """Both laws through the same trials: the pooled one, and the line through the per-budget
    optima whose lr lies inside the searched range (as `law_fit` draws it)."""
    from tuner.modeling.laws.pooled_law import fit_pooled_law
    from tuner.modeling.laws.power_law import fit_power_law
    from tuner.modeling.laws.response_surface import fit_optimum

    pooled = fit_pooled_law(tokens, lrs, losses, seed=seed, n_boot=n_boot)
    kept = [(t, o) for i, (t, lr, z) in enumerate(zip(tokens, lrs, losses))
            for o in [fit_optimum(lr, [256.0] * len(lr), z, seed=seed + i, n_boot=n_boot)]
            if "lr" not in o.at_edge]
    line = (fit_power_law([t for t, _ in kept], [o.lr for _, o in kept],
                          [[10 ** s[0] for s in o.samples] for _, o in kept])
            if len(kept) >= 2 else None)
    return {"pooled": pooled.law, "line": line, "lack_of_fit_p": pooled.lack_of_fit_p,
            "left_out": [(tokens[i], p) for i, p in pooled.left_out],
            "line_budgets": [t for t, _ in kept]}


def simulate(n: int = 40) -> list[dict[str, Any]]:
    """The known-law simulation (module docstring): per noise sd and fit, the mean error of
    the held-out prediction, the share within 1.5x, the band's coverage and median width."""
    sys.path.insert(0, str(ROOT / "tests" / "tuner"))
    from test_pooled_law import HELD, LR_HELD, TOKENS, trials

    rows = []
    for sd in (0.03, 0.07):
        err: dict[str, list[float]] = {"pooled": [], "line": []}
        cover: dict[str, list[bool]] = {"pooled": [], "line": []}
        width: dict[str, list[float]] = {"pooled": [], "line": []}
        for seed in range(n):
            lrs, losses = trials(np.random.default_rng(1000 + seed), sd=sd)
            f = _fits(lrs, losses, TOKENS, seed=seed, n_boot=100)
            for name in ("pooled", "line"):
                law = f[name]
                lo, hi = law.band(HELD)
                err[name].append(abs(math.log10(law.at(HELD) / LR_HELD)))
                cover[name].append(lo <= LR_HELD <= hi)
                width[name].append(hi / lo)
        for name in ("pooled", "line"):
            rows.append({"sd": sd, "fit": name, "n": n,
                         "mean_error_x": 10 ** float(np.mean(err[name])),
                         "within_1_5x": float(np.mean(np.array(err[name]) < math.log10(1.5))),
                         "coverage": float(np.mean(cover[name])),
                         "median_width_x": float(np.median(width[name]))})
    return rows


FAR_DECADES = 2.0  # how far past the held-out budget the refit simulation predicts


def held_out_refit(n: int = 40) -> list[dict[str, Any]]:
    """Does the held-out budget, once checked, improve the law further out? Known-law studies
    with a fifth budget at the held-out tokens (a flatter bowl, curvature 0.1), 8 or 16 trials
    per budget: the pooled law through the 4 fitted budgets against the one through all 5, each
    predicting lr* `FAR_DECADES` past the held-out budget; on a true power law and on one bent
    in log-log (0.1 per decade², lr* decaying more slowly toward longer budgets)."""
    sys.path.insert(0, str(ROOT / "tests" / "tuner"))
    from test_pooled_law import CURVATURES, HELD, TOKENS, trials, true_lr

    from tuner.modeling.laws.pooled_law import fit_pooled_law

    tokens, curv = TOKENS + [HELD], CURVATURES + [0.1]
    far = HELD * 10 ** FAR_DECADES
    rows = []
    for bend, sd, per in itertools.product((0.0, 0.1), (0.03, 0.07), (8, 16)):
        stats: dict[int, dict[str, list[float]]] = {
            k: {"err": [], "cover": [], "width": []} for k in (4, 5)}
        for seed in range(n):
            lrs, losses = trials(np.random.default_rng(3000 + seed), sd=sd, bend=bend, n=per,
                                 tokens=tokens, curvatures=curv)
            truth = true_lr(far, bend)
            for k in (4, 5):
                law = fit_pooled_law(tokens[:k], lrs[:k], losses[:k], n_boot=100,
                                     seed=seed).law
                lo, hi = law.band(far)
                stats[k]["err"].append(abs(math.log10(law.at(far) / truth)))
                stats[k]["cover"].append(float(lo <= truth <= hi))
                stats[k]["width"].append(hi / lo)
        for k in (4, 5):
            rows.append({"bend": bend, "sd": sd, "trials": per, "budgets": k, "n": n,
                         "mean_error_x": 10 ** float(np.mean(stats[k]["err"])),
                         "median_error_x": 10 ** float(np.median(stats[k]["err"])),
                         "coverage": float(np.mean(stats[k]["cover"])),
                         "median_width_x": float(np.median(stats[k]["width"]))})
    return rows


def lack_of_fit_level(n: int = 150) -> list[dict[str, Any]]:
    """How often the lack-of-fit test says a law does not hold (p < 0.05): on a true power law
    (the level, ideally 5%), with the smallest budget's optimum 4x off the law, and with the
    law bent in log-log (its power), at both noise levels."""
    sys.path.insert(0, str(ROOT / "tests" / "tuner"))
    from test_pooled_law import TOKENS, trials

    from tuner.modeling.laws.pooled_law import fit_pooled_law

    rows = []
    for sd in (0.03, 0.07):
        for case, kw in (("true power law", {}), ("smallest budget 4x off", {"first_off": 4.0}),
                         ("law bent (0.35 per decade²)", {"bend": 0.35})):
            ps = [fit_pooled_law(TOKENS, *trials(np.random.default_rng(2000 + s), sd=sd, **kw),
                                 n_boot=1, trim=False).lack_of_fit_p for s in range(n)]
            rows.append({"sd": sd, "case": case, "n": n,
                         "rejected": float(np.mean(np.array(ps) < 0.05))})
    return rows


def _trials(seed: int, root: Path) -> tuple[list[list[float]], list[list[float]]]:
    """Each fitted budget's feasible trials (lr, val_loss) from the seed's stored studies."""
    import optuna

    from tuner.study.results.trial_record import trial_records
    from tuner.study.specs.law_spec import budget_name
    from tuner.study.specs.spec import load_spec
    from tuner.study.store import storage as st

    spec = load_spec(root / f"law-s{seed}.toml")
    store = optuna.storages.RDBStorage(f"sqlite:///{root / 'runs' / spec.name / 'study.db'}")
    lrs, losses = [], []
    for i in range(len(spec.law.tokens)):
        recs = [r for r in trial_records(st.load_study(budget_name(spec.name, spec.law, i),
                                                       store)) if r.feasible]
        lrs.append([r.recipe.lr for r in recs])
        losses.append([r.values["val_loss"] for r in recs])
    return lrs, losses


def real(seeds: list[int], root: Path, trials: int = REAL["trials"]) -> list[dict[str, Any]]:
    """Per seed and fit (all 4 budgets, and without the 16-step smallest), the prediction at
    the held-out budget against the lr* the one-batch mode measured there; ``trials`` per
    budget."""
    measured = read_json(BENCH / "law.json", None)["seeds"]
    held = REAL["held_out"]
    rows = []
    for seed in seeds:
        lrs, losses = _trials(seed, root)
        lr_held = measured[str(seed)]["held_out_check"]["lr_measured"]
        for first, label in ((0, "all 4 budgets"), (1, "without the smallest")):
            f = _fits(lrs[first:], losses[first:], REAL["tokens"][first:], seed=seed)
            for name in ("pooled", "line"):
                law = f[name]
                if law is None:
                    continue
                lo, hi = law.band(held)
                rows.append({"seed": seed, "trials": trials, "budgets": label, "fit": name,
                             "exponent": law.exponent,
                             "exponent_interval": list(law.exponent_interval),
                             "predicted": law.at(held), "band": [lo, hi],
                             "measured": lr_held, "ratio": law.at(held) / lr_held,
                             "inside": lo <= lr_held <= hi,
                             "lack_of_fit_p": f["lack_of_fit_p"] if name == "pooled" else None,
                             "left_out": f["left_out"] if name == "pooled" else None,
                             "line_budgets": f["line_budgets"] if name == "line" else None})
    return rows


def exponents(seeds: list[int], roots: dict[str, Path]) -> list[dict[str, Any]]:
    """Per corpus and seed (fitted budgets only): both fits' lr exponents and their
    predictions at the held-out budget's tokens, for bytes against BPE (issue 27)."""
    rows = []
    for corpus, root in roots.items():
        for seed in seeds:
            if not db_path(root, seed).exists():
                continue
            lrs, losses = _trials(seed, root)
            if min(len(v) for v in lrs) < REAL["trials"]:
                continue  # still running
            f = _fits(lrs, losses, REAL["tokens"], seed=seed)
            for name in ("pooled", "line"):
                law = f[name]
                if law is None:
                    continue
                lo, hi = law.band(REAL["held_out"])
                rows.append({"corpus": corpus, "seed": seed, "fit": name,
                             "exponent": law.exponent,
                             "exponent_interval": list(law.exponent_interval),
                             "predicted": law.at(REAL["held_out"]), "band": [lo, hi],
                             "left_out": f["left_out"] if name == "pooled" else None,
                             "best_lr": [float(lr[int(np.argmin(z))])
                                         for lr, z in zip(lrs, losses)]})
    return rows


def _agreement(rows: list[dict[str, Any]]) -> str:
    """Each seed's prediction inside another seed's band, and the predictions' spread."""
    inside, pairs = pairs_inside([(r["predicted"], r["band"]) for r in rows])
    preds = [r["predicted"] for r in rows]
    return (f"{inside}/{pairs} pairs inside, spread "
            f"{max(preds) / min(preds):.2f}x")


def results_lines(data: dict[str, Any]) -> list[str]:
    lines = ["Pooled (`tuner.modeling.laws.pooled_law`, what a law study at one batch now "
             "fits): one surface over every budget's trials, the bowls' bottoms on the law, the "
             "smallest budget left out while one power law does not hold. Line: the line "
             "through the per-budget optima inside their ranges (the law before).", "",
             "Commands: `nice -n 15 python benchmarks/bench_law.py pooled` (real trainings: "
             "bench_law's design, debug proxy, fp32, batch 2 x 128 tokens, 8 qmc trials per "
             f"budget at {REAL['tokens']} tokens; the held-out lr* at {REAL['held_out']} is "
             "bench_law's measurement, benchmarks/law.json) and `python "
             "benchmarks/bench_law.py pooled --results` (the fits and the simulation). Both fits "
             "read the same trials. Measured: the trainings and the held-out lr*; the rest is "
             "fitted.", "",
             "**Simulation** (a known power law, exponent -0.3, quadratic bowls with curvature "
             "2 / 0.8 / 0.4 / 0.2 per decade² from the smallest budget up, 8 stratified lrs per "
             "budget over 3e-4..6e-2, the held-out budget 5x above the largest):", "",
             "| noise sd | fit | studies | mean error (x) | within 1.5x | 95% band covers | "
             "median band width |", "|---|---|---|---|---|---|---|"]
    for r in data["simulation"]:
        lines.append(f"| {r['sd']} | {r['fit']} | {r['n']} | {r['mean_error_x']:.2f} | "
                     f"{r['within_1_5x']:.2f} | {r['coverage']:.2f} | "
                     f"{r['median_width_x']:.2f}x |")
    lines += ["", "Lack-of-fit test (p < 0.05 says one power law does not hold; trimming off):",
              "", "| noise sd | case | studies | said 'does not hold' |", "|---|---|---|---|"]
    for r in data.get("lack_of_fit", []):
        lines.append(f"| {r['sd']} | {r['case']} | {r['n']} | {r['rejected']:.2f} |")
    if data.get("held_out_refit"):
        lines += ["", f"**The held-out budget joining the law after its check** (simulation: "
                  f"the design above plus a fifth budget at the held-out tokens; the "
                  f"pooled law through the 4 fitted budgets against the one through all 5, each "
                  f"predicting lr* {FAR_DECADES:g} decades past the held-out budget):", "",
                  "| law | noise sd | trials per budget | budgets in the law | studies | "
                  "mean error (x) | median error (x) | 95% band covers | median band width |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in data["held_out_refit"]:
            law = ("true power law" if r["bend"] == 0 else
                   f"bent ({r['bend']:g} per decade²)")
            lines.append(f"| {law} | {r['sd']} | {r['trials']} | {r['budgets']} | {r['n']} | "
                         f"{r['mean_error_x']:.2f} | {r['median_error_x']:.2f} | "
                         f"{r['coverage']:.2f} | {r['median_width_x']:.1f}x |")
    lines += ["", "**Real trainings** (held-out lr* measured per seed by bench_law):", "",
              "| trials per budget | seed | budgets given | fit | lr exponent [95%] | held-out lr "
              "pred [band] | measured | pred / measured | inside | band width | lack of fit p | "
              "left out by the fit (tokens: p with it) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in data["real"]:
        e = r["exponent_interval"]
        p = "—" if r["lack_of_fit_p"] is None else f"{r['lack_of_fit_p']:.2g}"
        gone = ("—" if r.get("left_out") is None else
                ", ".join(f"{t}: {q:.2g}" for t, q in r["left_out"]) or "none")
        lines.append(f"| {r.get('trials', 8)} | {r['seed']} | {r['budgets']} | {r['fit']} | "
                     f"{r['exponent']:+.2f} [{e[0]:+.2f}, {e[1]:+.2f}] | {r['predicted']:.3g} "
                     f"[{r['band'][0]:.3g}, {r['band'][1]:.3g}] | {r['measured']:.3g} | "
                     f"{r['ratio']:.2f} | {'yes' if r['inside'] else 'no'} | "
                     f"{r['band'][1] / r['band'][0]:.1f}x | {p} | {gone} |")
    lines += [""]
    for n in sorted({r.get("trials", 8) for r in data["real"]}):
        for label in ("all 4 budgets", "without the smallest"):
            for fit in ("pooled", "line"):
                rows = [r for r in data["real"] if r["budgets"] == label and r["fit"] == fit
                        and r.get("trials", 8) == n]
                if len(rows) > 1:
                    within = sum(1 / 1.5 <= r["ratio"] <= 1.5 for r in rows)
                    widths = ", ".join(f"{r['band'][1] / r['band'][0]:.1f}x" for r in rows)
                    lines.append(f"- {n} trials, {label}, {fit}: within 1.5x of the measured "
                                 f"{within}/{len(rows)}; across seeds {_agreement(rows)}; "
                                 f"bands {widths}.")
    if data.get("held_out_product"):
        lines += ["", "**The held-out budget through the product** (`--held-out 8`: on a copy of "
                  "each seed's fitted budgets, `moetune resume` predicts the held-out budget, "
                  f"stores the prediction, runs the predicted recipe and then its own 8 qmc "
                  f"trials at {REAL['held_out']} tokens, and writes law.md; the held-out "
                  "budget then joins the law):", "",
                  "| trials per fitted budget | seed | lr predicted [band] | measured [95%] | "
                  "pred / measured | inside | predicted recipe vs optimum | law with the "
                  "held-out budget: exponent [95%] | lack of fit p | 671B lr [band] |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in data["held_out_product"]:
            h, e = r["held_out_check"], r["exponent_interval"]
            gap = (f"{h['loss_gap_sd']:+.2f} sd, {h['loss_gap_pct']:+.2f}%"
                   if "loss_gap" in h else "—")
            full = (f"{r['full_lr']:.3g} [{r['full_band'][0]:.3g}, {r['full_band'][1]:.3g}]"
                    if r.get("full_lr") else "—")
            lines.append(f"| {r['trials']} | {r['seed']} | {h['lr_predicted']:.3g} "
                         f"[{h['lr_band'][0]:.3g}, {h['lr_band'][1]:.3g}] | "
                         f"{h['lr_measured']:.3g} [{h['lr_interval'][0]:.3g}, "
                         f"{h['lr_interval'][1]:.3g}] | {h['lr_ratio']:.2f} | "
                         f"{'yes' if h['lr_inside'] else 'no'} | {gap} | "
                         f"{r['exponent']:+.2f} [{e[0]:+.2f}, {e[1]:+.2f}] (budgets "
                         f"{', '.join(map(str, r['lr_budgets']))}) | "
                         f"{r['lack_of_fit_p']:.2g} | {full} |")
    if data.get("vocab"):
        lines += ["", "**Bytes against BPE** (issue 27: the same design on the same text, "
                  "its BPE tokens; the laws in tokens of each; no held-out search on BPE):", "",
                  "| corpus | seed | fit | lr exponent [95%] | lr at 655,360 tokens [band] | "
                  "left out | best-of-8 lr per budget |", "|---|---|---|---|---|---|---|"]
        for r in data["vocab"]:
            e = r["exponent_interval"]
            gone = ("—" if r["left_out"] is None else
                    ", ".join(str(t) for t, _ in r["left_out"]) or "none")
            lines.append(f"| {r['corpus']} | {r['seed']} | {r['fit']} | {r['exponent']:+.2f} "
                         f"[{e[0]:+.2f}, {e[1]:+.2f}] | {r['predicted']:.3g} "
                         f"[{r['band'][0]:.3g}, {r['band'][1]:.3g}] | {gone} | "
                         f"{', '.join(f'{v:.2g}' for v in r['best_lr'])} |")
    return lines + [""] + ["- " + n for n in data.get("notes", [])]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", action="store_true", help="no trainings: refit and report")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--root", type=Path, default=ROOT / "runs" / "bench_law_pooled")
    p.add_argument("--trials", type=int, default=REAL["trials"],
                   help="qmc trials per budget (bytes only); other than 8 runs under ROOT-tN, and "
                        "its rows join the results beside the 8-trial ones")
    p.add_argument("--held-out", type=int, default=0, metavar="TRIALS",
                   help="run the held-out budget (TRIALS trials after the predicted recipe) of "
                        "the --trials N seeds' laws through `moetune resume` on a copy under "
                        "ROOT-tN-held (bytes only)")
    p.add_argument("--tokenizer", default="", metavar="bpe:N",
                   help="the same design on the same text as BPE tokens (issue 27): runs under "
                        "ROOT-bpeN, and its exponents join the results beside the bytes'")


def run(a: argparse.Namespace) -> int:
    if a.tokenizer:
        sub = a.root.with_name(a.root.name + "-" + a.tokenizer.replace(":", ""))
        for seed in a.seeds:
            print(f"{a.tokenizer} seed {seed} ...", file=sys.stderr, flush=True)
            run_seed(seed, sub, a.tokenizer)
        return 0
    trial_roots = {REAL["trials"]: a.root} | {
        n: a.root.with_name(f"{a.root.name}-t{n}") for n in {a.trials} - {REAL["trials"]}}
    if a.held_out:
        src = trial_roots[a.trials]
        for seed in a.seeds:
            print(f"seed {seed}: held-out budget ({a.held_out} trials) ...", file=sys.stderr,
                  flush=True)
            run_held_out(seed, src, src.with_name(src.name + "-held"), a.held_out)
    elif not a.results:
        for seed in a.seeds:
            print(f"seed {seed} ({a.trials} trials per budget) ...", file=sys.stderr, flush=True)
            run_seed(seed, trial_roots[a.trials], trials=a.trials)
    old = read_json(OUT, {})
    # rows whose trials are not on this machine (runs/ is not committed) come from the last
    # results; rows whose trials are here are refitted
    for path in a.root.parent.glob(a.root.name + "-t*"):
        if path.name.rsplit("-t", 1)[1].isdigit():
            trial_roots[int(path.name.rsplit("-t", 1)[1])] = path
    real_rows = []
    for n in sorted(trial_roots.keys() | {r.get("trials", 8) for r in old.get("real", [])}):
        root = trial_roots.get(n)
        if root and all(db_path(root, s).exists()
                        and min(map(len, _trials(s, root)[0])) >= n for s in a.seeds):
            real_rows += real(a.seeds, root, n)
        else:
            real_rows += [r for r in old.get("real", []) if r.get("trials", 8) == n]
    fresh = exponents(a.seeds, {c: a.root.with_name(a.root.name + suffix)
                                for c, suffix in CORPUS_ROOTS.items()})
    refitted = {(r["corpus"], r["seed"]) for r in fresh}
    vocab = fresh + [r for r in old.get("vocab", []) if (r["corpus"], r["seed"]) not in refitted]
    vocab.sort(key=lambda r: (list(CORPUS_ROOTS).index(r["corpus"]), r["seed"]))
    held_rows = []
    for n, root in sorted(trial_roots.items()):
        held = root.with_name(root.name + "-held")
        fresh_held = [r | {"trials": n} for r in held_out_rows(a.seeds, held)]
        seen = {r["seed"] for r in fresh_held}
        held_rows += fresh_held + [r for r in old.get("held_out_product", [])
                                   if r["trials"] == n and r["seed"] not in seen]
    data = {"real": real_rows, "held_out_product": held_rows,
            "simulation": simulate(), "lack_of_fit": lack_of_fit_level(),
            "held_out_refit": held_out_refit(), "vocab": vocab,
            "notes": old.get("notes", [])}
    write_json(OUT, data)
    from benchmarks.results_md import publish

    publish(HEADING, results_lines(data))
    return 0
