"""One budget further, on real trainings: with the held-out budget's cells fitted, does lr*(D, B)
predict 5x further out in tokens?

The grid (`benchmarks.law.grid`) found lr* falling past its fitted budgets faster than the law
through them says, from 4.5 to 23 tokens per parameter of the 116k-parameter proxy, where
nothing inside the grid showed it. This asks whether a law whose fitted cells reach that regime
predicts the next step: each seed's grid study is copied (its trainings kept), its stored spec
gains the old held-out budget (2,621,440 tokens) as a fifth fitted budget and a new held-out
budget 5x above it (13,107,200 tokens), searched at the largest batch alone
(``law.held_out_at_batch``: 2,048 tokens per step, the cheapest per token; 6 trials after the
predicted one; 1 x 2 noise re-trainings), and ``moetune resume`` predicts it from the five
fitted budgets' cells, stores the prediction, then runs it. The held-out batch is not re-run.
At 13.1M tokens the stdlib corpus (8 MiB, 95% of it train) is seen about 1.6 times.

    nice -n 15 python benchmarks/bench_law.py beyond --seeds 2 1   # real (~45 min a seed)
    python benchmarks/bench_law.py beyond --refit --seeds 2 1        # read the studies back
    python benchmarks/bench_law.py beyond --results                  # JSON -> RESULTS.md
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

from benchmarks.law.common import (
    BENCH,
    ROOT,
    db_path,
    g,
    read_json,
    stored_law_data,
    submit_or_resume,
    write_json,
)

OUT = BENCH / "law_beyond.json"
GRID = ROOT / "runs" / "bench_law_grid"
HEADING = "## One budget further: lr*(D, B) with the fall in its cells (real trainings)"
COMMAND = "nice -n 15 python benchmarks/bench_law.py beyond"
FACTOR = 5  # the new held-out budget over the largest fitted (law.toml's rule)
AT_BATCH = 16  # batch_end the new held-out budget searches: 2,048 tokens per step
TRIALS = 6  # trials per budget not yet created: the new held-out budget's (+ the predicted one)
TARGET = 1.5


def extend(path: Path, name: str) -> dict[str, Any]:
    """The stored spec of study ``name`` in the copy at ``path``, its held-out budget made a
    fitted one and a new held-out budget `FACTOR` x above it, searched at `AT_BATCH` alone;
    nothing when done before. Returns the law section as stored."""
    import optuna

    from tuner.study.store import records

    study = optuna.load_study(study_name=name, storage=f"sqlite:///{path}")
    spec = dict(study.user_attrs[records.SPEC])
    law = dict(spec["law"])
    if law.get("held_out_at_batch"):
        return law
    tokens = [*law["tokens"], law["held_out"]]
    dropped = ("held_out_batch", "held_out_batch_budget")
    law = {k: v for k, v in law.items() if k not in dropped} | {
        "tokens": tokens, "held_out": FACTOR * tokens[-1], "held_out_at_batch": AT_BATCH,
        "trials": TRIALS}
    spec["law"] = law
    spec["study"] = dict(spec["study"]) | {"noise_top": 1}
    study.set_user_attr(records.SPEC, spec)
    return law


def run_seed(seed: int, root: Path) -> None:
    """Seed ``seed``'s grid study copied under ``root`` (once), extended, resumed."""
    name = f"law-s{seed}"
    dst = db_path(root, seed)
    if not dst.exists():
        src = db_path(GRID, seed)
        if not src.exists():
            raise SystemExit(f"{src}: no grid study for seed {seed}; run `bench_law.py grid` "
                             "first")
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    extend(dst, name)
    submit_or_resume(name, None, root)


def seed_result(seed: int, root: Path) -> dict[str, Any] | None:
    """The seed's new held-out check (predicted before it ran, measured after), its law, and
    the `alternatives` at the new held-out cell."""
    data = stored_law_data(seed, root)
    if data is None:
        return None
    keep = ("held_out_check", "predicted", "lr_batch_law")
    path, name = db_path(root, seed), f"law-s{seed}"
    return {k: data.get(k) for k in keep} | {"alternatives": alternatives(path, name),
                                             "trials": held_out_trials(path, name)}


def held_out_trials(path: Path, name: str) -> list[list[float]]:
    """The new held-out budget's finished trials, [lr, val_loss], by lr."""
    import optuna

    from tuner.study.store import storage as st

    spec = st.stored_spec(optuna.load_study(study_name=name, storage=f"sqlite:///{path}"))
    held = optuna.load_study(study_name=f"{name}.t{spec.law.held_out}",
                             storage=f"sqlite:///{path}")
    return sorted([t.params["lr"], t.values[0]] for t in held.trials if t.values)


def alternatives(path: Path, name: str) -> dict[str, float]:
    """At the new held-out cell, from the fitted budgets alone (what the prediction saw): the
    law's own lr* (the product's point), the law bent in D (its u² term, the band's
    alternative), and the band's mixture of the two (its centre); and the bend itself. The
    product predicts with the first; the others are written down before the runs to be read
    against the same measurement, not chosen after it."""
    import optuna

    from tuner.study.store import storage as st
    from tuner.study.workflows.law_fit import budget_studies, fit_law

    url = f"sqlite:///{path}"
    spec = st.stored_spec(optuna.load_study(study_name=name, storage=url))
    studies = budget_studies(spec, optuna.storages.RDBStorage(url))
    law = fit_law(spec, [(i, s) for i, s in studies if i < len(spec.law.tokens)]).lr_batch
    if law is None:
        return {}
    tokens, batch = spec.law.held_out, AT_BATCH * spec.space.largest("seq_len")
    return {"tokens": tokens, "batch": batch, **law.readings(tokens, batch),
            "uu": law.form[-1], "uu_se": law.form_cov[-1][-1] ** 0.5, "shrink": law.bend_shrink}


def results_lines(data: dict[str, Any]) -> list[str]:
    """The RESULTS.md section: per seed, lr*(D, B) at the new held-out budget and the one batch
    it searched, predicted [band] / measured, and the predicted recipe's cost."""
    out = [f"Command: `{COMMAND} --seeds {' '.join(data['seeds'])}` "
           "(`benchmarks/law/beyond.py`: each seed's grid study copied, its held-out budget "
           f"(2,621,440 tokens) fitted as a fifth budget, a new held-out budget {FACTOR}x above "
           f"it searched at batch_end {AT_BATCH} alone (2,048 tokens per step), {TRIALS} trials "
           "after the predicted one, real trainings). Measured: the trainings and the new "
           "budget's lr* (a quadratic in log lr within 0.5 decades of its best trial). Modeled: "
           "lr*(D, B) through the five fitted budgets' cells and its prediction, made and stored "
           "before the new budget's first trial.", "",
           "| seed | lr*(D, B) at 13.1M tokens, 2,048 per step: pred [band] | measured "
           "[interval] | ratio | the predicted recipe's trial | the bent law / the band's "
           "centre: lr (ratio), written down before the runs |", "|---|---|---|---|---|---|"]
    pre = data.get("preregistered", {})
    ok = n = 0
    for seed, d in data["seeds"].items():
        h = (d or {}).get("held_out_check")
        alt = pre.get(seed) or (d or {}).get("alternatives") or {}
        if not h:
            out.append(f"| {seed} | not reached yet | | | | {_readings(alt, None)} |")
            continue
        n += 1
        ok += 1 / TARGET <= h["lr_ratio"] <= TARGET
        lo, hi = h["lr_band"]
        mlo, mhi = h["lr_interval"]
        gap, sd = h.get("loss_gap_best"), h.get("loss_gap_best_sd")
        out.append(f"| {seed} | {g(h['lr_predicted'])} [{g(lo)}, {g(hi)}] | "
                   f"{g(h['lr_measured'])} [{g(mlo)}, {g(mhi)}] | {h['lr_ratio']:.2f} "
                   f"({'inside' if h['lr_inside'] else 'outside'} the band) | "
                   + (f"{gap:+.3f}" + (f" ({sd:.1f} noise sd)" if sd is not None else "")
                      + " from the best searched" if gap is not None else "-")
                   + f" | {_readings(alt, h['lr_measured'])} |")
    out += ["", f"- lr* predicted within {TARGET}x of the measured in {ok}/{n} seeds."]
    out += [f"- Seed {seed}'s trials at the new held-out budget (lr: val_loss): "
            + ", ".join(f"{g(lr)}: {loss:.3f}" for lr, loss in d["trials"]) + "."
            for seed, d in data["seeds"].items() if d and d.get("trials")]
    return out + [f"- {note}" for note in data.get("notes", [])]


def _readings(alt: dict[str, Any], measured: float | None) -> str:
    """The bent law's and the mixture's lr* at the cell, with their ratios to ``measured``, and
    the grid's own law's where it was written down."""
    if not alt:
        return "-"
    def read(k: str) -> str:
        return f"{g(alt[k])}" + (f" ({alt[k] / measured:.2f})" if measured else "")

    said = " / ".join(read(k) for k in ("bent", "mixture"))
    said += f" (bend {alt['uu']:+.3f} ± {alt['uu_se']:.3f})"
    if "grid_law" in alt:  # recorded from seed 3 on: does the grid law's lean go on?
        said += ("; the grid's own law (its four budgets, before the held-out one joined) "
                 + read("grid_law"))
    return said


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seeds", type=int, nargs="+", default=[2, 1, 0])
    p.add_argument("--root", type=Path, default=ROOT / "runs" / "bench_law_beyond")
    p.add_argument("--results", action="store_true", help="no trainings: JSON -> RESULTS.md")
    p.add_argument("--refit", action="store_true",
                   help="no trainings: read each seed back from its stored studies")


def run(a: argparse.Namespace) -> int:
    data: dict[str, Any] = read_json(OUT, {"seeds": {}})
    if not a.results:
        for seed in a.seeds:
            if not a.refit:
                print(f"seed {seed} ...", file=sys.stderr, flush=True)
                run_seed(seed, a.root)
            data["seeds"][str(seed)] = seed_result(seed, a.root)
            write_json(OUT, data)
    from benchmarks.results_md import publish

    publish(HEADING, results_lines(data))
    return 0
