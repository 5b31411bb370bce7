"""A ladder's transfer report: how far each rung's answer carries to the next width.

``ladder.md`` (and ``ladder_lr.png``) in the bottom rung's run folder, from the rung studies'
own data (`tuner.study.workflows.ladder`):

- per rung: width, active parameters, its own trials, the training compute they spent (tokens ×
  6 × active parameters: modeled from counts, not timed), the best trial;
- between consecutive rungs: Spearman's ρ between the promoted candidates' results below and
  above, with a 95% bootstrap interval at that n (pairs resampled);
- which knobs changed: per numeric knob, Spearman's ρ between its value and the objective over
  each rung's own trials (a sign that flips between rungs is flagged), per categorical knob the
  choice with the best mean;
- the µTransfer view: the objective against the learning rate at each width, and where the best
  learning rate sits (log10 shift from the bottom rung), as numbers and as ``ladder_lr.png``;
- the command that exports the top rung's answer, with the width it was measured at.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from trainers.presets import count_params
from tuner.study.results.trial_record import Objective, TrialRecord, study_objectives
from tuner.study.specs.ladder_spec import rung_name
from tuner.study.specs.proxy import resolve_model_args
from tuner.study.specs.spec import StudySpec
from tuner.study.store import database as db
from tuner.study.store.storage import stored_spec
from tuner.study.workflows.ladder import candidate_pairs, rung_studies, rung_trials
from tuner.study.workflows.validate import spearman

BOOTSTRAP = 2000


def transfer_rho(below: list[float], above: list[float], *, seed: int = 0
                 ) -> tuple[float, float, float]:
    """Spearman's ρ of the pairs and its 95% bootstrap interval (NaN where n < 3 or a
    resample is constant on a side)."""
    n = len(below)
    if n < 2:
        return math.nan, math.nan, math.nan
    rho = spearman(below, above)
    if n < 3:
        return rho, math.nan, math.nan
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(BOOTSTRAP):
        idx = rng.integers(0, n, n)
        r = spearman([below[i] for i in idx], [above[i] for i in idx])
        if math.isfinite(r):
            draws.append(r)
    if len(draws) < BOOTSTRAP // 2:
        return rho, math.nan, math.nan
    lo, hi = np.percentile(draws, [2.5, 97.5])
    return rho, float(lo), float(hi)


def _objective(objectives: list[Objective]) -> Objective:
    return next((o for o in objectives if o.name == "val_loss"), objectives[0])


def _best(recs: list[TrialRecord], o: Objective) -> TrialRecord | None:
    feas = [r for r in recs if r.feasible and math.isfinite(r.values.get(o.name, math.nan))]
    if not feas:
        return None
    sign = 1.0 if o.direction == "minimize" else -1.0
    return min(feas, key=lambda r: (sign * r.values[o.name], r.number))


def ladder_data(spec: StudySpec, url: str) -> dict[str, Any]:
    """Everything ``ladder.md`` says, as numbers."""
    store = db.open_existing_storage(url)
    studies = rung_studies(spec, store)
    if not studies:
        raise LookupError(f"ladder {spec.name}: no rung study in {db.shown(url)}")
    o = _objective(study_objectives(studies[0]))
    rungs = []
    for i, study in enumerate(studies):
        rspec = stored_spec(study)
        args = resolve_model_args(rspec)
        recs = list(rung_trials(study))
        best = _best(recs, o)
        active = count_params(args)[1]
        finished = [r for r in recs if r.values]
        rungs.append({
            "rung": i, "study": study.study_name, "width": rspec.ladder.width,
            "active_params": active, "trials": len(finished),
            "compute_flops": 6.0 * active * rspec.budget.tokens_per_trial * len(finished),
            "best": None if best is None else {"trial": best.number,
                                               "value": best.values[o.name],
                                               "params": best.params},
            "lr": [(r.params["lr"], r.values[o.name]) for r in recs
                   if r.feasible and "lr" in r.params
                   and math.isfinite(r.values.get(o.name, math.nan))],
            "knobs": _knobs(recs, o)})
    transfers = []
    for lower, upper in zip(studies, studies[1:]):
        pairs = [(a.values[o.name], b.values[o.name]) for a, b in candidate_pairs(lower, upper)
                 if math.isfinite(a.values.get(o.name, math.nan))
                 and math.isfinite(b.values.get(o.name, math.nan))]
        rho, lo, hi = transfer_rho([p[0] for p in pairs], [p[1] for p in pairs])
        transfers.append({"from": lower.study_name, "to": upper.study_name, "n": len(pairs),
                          "rho": rho, "low": lo, "high": hi})
    return {"ladder": spec.name, "objective": o.name, "direction": o.direction,
            "widths": list(spec.ladder.widths), "mup": spec.ladder.mup,
            "promote": spec.ladder.promote, "rungs": rungs, "transfers": transfers,
            "top": rung_name(spec.name, spec.ladder.widths, len(spec.ladder.widths) - 1),
            "complete": len(studies) == len(spec.ladder.widths), "storage": db.shown(url)}


def _knobs(recs: list[TrialRecord], o: Objective) -> dict[str, Any]:
    """Per knob: Spearman's ρ with the objective (numeric) or the best mean choice
    (categorical), over the rung's own feasible trials."""
    feas = [r for r in recs if r.feasible and math.isfinite(r.values.get(o.name, math.nan))]
    out: dict[str, Any] = {}
    for name in sorted({k for r in feas for k in r.params}):
        have = [r for r in feas if name in r.params]
        values = [r.params[name] for r in have]
        ys = [r.values[o.name] for r in have]
        if len(set(map(str, values))) < 2:
            continue
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            out[name] = {"rho": spearman([float(v) for v in values], ys), "n": len(have)}
        else:
            means: dict[str, list[float]] = {}
            for v, y in zip(values, ys):
                means.setdefault(str(v), []).append(y)
            sign = 1.0 if o.direction == "minimize" else -1.0
            best = min(means, key=lambda k: sign * float(np.mean(means[k])))
            out[name] = {"best_choice": best, "n": len(have)}
    return out


def _fmt_rho(t: dict[str, Any]) -> str:
    if not math.isfinite(t["rho"]):
        return f"n/a (n = {t['n']})"
    ci = (f" [{t['low']:+.2f}, {t['high']:+.2f}]" if math.isfinite(t["low"])
          else " (interval needs n >= 3)")
    return f"{t['rho']:+.2f}{ci}, n = {t['n']}"


def markdown(data: dict[str, Any]) -> list[str]:
    o, rungs = data["objective"], data["rungs"]
    out = [f"# Ladder {data['ladder']}: {' → '.join(map(str, data['widths']))}", "",
           f"Each rung is a study in one storage ({data['storage']}); the best "
           f"{data['promote']:.0%} of a rung's feasible trials (ties within the noise kept "
           f"together) climb to the next width. µP {'on' if data['mup'] else 'off'}"
           + (f" (base width {data['widths'][0]}: a learning rate means the same on every "
              "rung)" if data["mup"] else "") + ". All values measured unless marked.", ""]
    if not data["complete"]:
        out += [f"**Not finished**: the top rung ({data['top']}) has not run yet; "
                f"`moetune resume {data['ladder']}` goes on.", ""]
    out += ["| rung | width | study | active params | trials | compute (modeled, FLOPs) | "
            f"best {o} (trial) | its lr |", "|---|---|---|---|---|---|---|---|"]
    for r in rungs:
        b = r["best"]
        best = f"{b['value']:.4g} (#{b['trial']})" if b else "-"
        lr = f"{b['params']['lr']:.3g}" if b and "lr" in b["params"] else "-"
        out.append(f"| {r['rung']} | {r['width']} | {r['study']} | {r['active_params']:,} | "
                   f"{r['trials']} | {r['compute_flops']:.3g} | {best} | {lr} |")
    total = sum(r["compute_flops"] for r in rungs)
    top = rungs[-1]
    if top["trials"]:
        per_top = top["compute_flops"] / top["trials"]
        out += ["", f"Compute of the whole ladder: {total:.3g} FLOPs = "
                f"{total / per_top:.1f} trainings at the top width "
                f"({rungs[0]['trials']} candidates at the bottom).", ""]
    out += ["## Transfer between rungs", "",
            f"Spearman's ρ between the promoted candidates' {o} below and the same candidates "
            "above (1: the order carried over; 95% bootstrap interval at that n):", ""]
    for t in data["transfers"]:
        out.append(f"- {t['from']} → {t['to']}: ρ = {_fmt_rho(t)}")
    out += ["", "## Knobs per rung", "",
            f"Numeric knobs: Spearman's ρ between the knob and {o} over the rung's own trials; "
            "categorical knobs: the choice with the best mean. ⚠ marks a knob whose direction "
            "or best choice changed between rungs.", "",
            "| knob | " + " | ".join(f"width {r['width']}" for r in rungs) + " |",
            "|---|" + "---|" * len(rungs)]
    for name in sorted({k for r in rungs for k in r["knobs"]}):
        cells, signs, choices = [], set(), set()
        for r in rungs:
            k = r["knobs"].get(name)
            if k is None:
                cells.append("-")
            elif "rho" in k:
                cells.append(f"ρ {k['rho']:+.2f} (n {k['n']})" if math.isfinite(k["rho"])
                             else f"n/a (n {k['n']})")
                if math.isfinite(k["rho"]) and abs(k["rho"]) >= 0.3 and k["n"] >= 4:
                    signs.add(k["rho"] > 0)
            else:
                cells.append(f"{k['best_choice']} (n {k['n']})")
                choices.add(k["best_choice"])
        flag = " ⚠" if len(signs) > 1 or len(choices) > 1 else ""
        out.append(f"| {name}{flag} | " + " | ".join(cells) + " |")
    out += ["", "## Learning rate across widths (µTransfer view)", ""]
    lr_rows = [r for r in rungs if r["best"] and "lr" in r["best"]["params"]]
    if lr_rows:
        base = math.log10(lr_rows[0]["best"]["params"]["lr"])
        for r in lr_rows:
            lr = r["best"]["params"]["lr"]
            out.append(f"- width {r['width']}: best lr {lr:.3g} "
                       f"({math.log10(lr) - base:+.2f} decades from width "
                       f"{lr_rows[0]['width']}; {len(r['lr'])} trials)")
        out += ["", "![objective vs lr per width](ladder_lr.png)", "",
                "Upper rungs hold only the promoted candidates (and any proposals): their "
                "optimum is the best of few learning rates, not a sweep."]
    else:
        out.append("lr is not searched: no learning-rate view.")
    out += ["", "## Export the answer", "",
            f"The top rung's result ({data['top']}) is the ladder's answer, measured at width "
            f"{data['widths'][-1]}; exporting the ladder exports it (add `--root` or "
            "`--storage` as for the bottom study, and your full run's numbers):", "", "```",
            f"moetune export {data['ladder']} --target deepseek-v3-671b --gpus 2048 "
            "--tokens 14.8e12 --format megatron",
            "```", ""]
    return out


def lr_figure(data: dict[str, Any]) -> Figure:
    fig = Figure(figsize=(6.5, 4.2))
    ax = fig.add_subplot(1, 1, 1)
    for r in data["rungs"]:
        pts = sorted(r["lr"])
        if not pts:
            continue
        xs, ys = zip(*pts)
        line = ax.plot(xs, ys, "o", alpha=0.7, label=f"width {r['width']} ({len(pts)} trials)")
        if r["best"] and "lr" in r["best"]["params"]:
            ax.plot([r["best"]["params"]["lr"]], [r["best"]["value"]], "*", ms=14,
                    color=line[0].get_color())
    ax.set_xscale("log")
    ax.set_xlabel("learning rate")
    ax.set_ylabel(f"{data['objective']} (measured)")
    ax.set_title(f"ladder {data['ladder']}: {data['objective']} vs lr per width "
                 f"(µP {'on' if data['mup'] else 'off'}; ★ best)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def write_ladder_report(spec: StudySpec, *, url: str, out: Path) -> dict[str, Path]:
    data = ladder_data(spec, url)
    out.mkdir(parents=True, exist_ok=True)
    md = out / "ladder.md"
    md.write_text("\n".join(markdown(data)) + "\n")
    paths = {"ladder_md": md}
    if any(r["lr"] for r in data["rungs"]):
        png = out / "ladder_lr.png"
        lr_figure(data).savefig(png, dpi=90)
        paths["ladder_png"] = png
    return paths
