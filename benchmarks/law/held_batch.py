"""The held-out batch where its bowl has steps, on real trainings: lr*(D, B) of the shipped grid
predicted at 8,192 tokens per step (4x the largest fitted batch) at 2,621,440 tokens, a budget
the law goes through, 320 steps instead of the grid's 64.

The grid (`benchmarks.law.grid`) held its batch out at the largest fitted budget, 524,288
tokens: 64 steps of 8,192 tokens, where the bowl was flat from about 0.003 to 0.05 within the
noise and two estimators of the same 24 trials differed by 1.9-2.6x, so the check could not pin
lr* (1 of 3 seeds within 1.5x, one not judged). Here the same batch is held out at the grid's
held-out budget, which joined the law after its check (``law.held_out_batch_budget =
"held_out"``, the product's option for it, now law.toml's): 5x the steps at the same batch.

Each seed's law is the one benchmarks/law_grid.json stores for it (lr*(D, B) through the five
budgets' cells, the held-out budget's included, as `law_data` read them from the seed's
studies, which are not kept). ``--predict`` writes its lr* and band at the cell into
benchmarks/law_held_batch.json ("preregistered"), to be committed before any trial runs; a
seed runs only once its prediction is there. The budget is the product's: law.toml with its
name and seed set (`grid.spec_text`) and ``held_out_batch_budget`` set, its held-out batch's
spec made by `tuner.study.workflows.law.budget_spec` with that prediction and its first trial
at the predicted lr, run by `tuner.study.run.runner.run_study` as the law runs a stage (12
trials after the predicted one where law.toml has 24, and 1 x 2 noise re-trainings: `TRIALS`),
in its own storage; the check is the product's (`law_fit.fit_law(...).held_out_batch_check()`:
the cell's lr* measured as the law's cells are, the predicted trial left out, the whole-range
quadratic beside it).

    python benchmarks/bench_law.py held-batch --predict                 # the predictions
    nice -n 15 python benchmarks/bench_law.py held-batch --seeds 0 1 2  # real (~16 min a seed)
    python benchmarks/bench_law.py held-batch --refit                   # read the studies back
    python benchmarks/bench_law.py held-batch --results                 # JSON -> RESULTS.md
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.law.common import BENCH, ROOT, g, pairs_inside, read_json, within, write_json
from benchmarks.law.grid import spec_text

OUT = BENCH / "law_held_batch.json"
GRID = BENCH / "law_grid.json"
HEADING = "## The held-out batch at the held-out budget: 320 steps, not 64 (real trainings)"
COMMAND = "nice -n 15 python benchmarks/bench_law.py held-batch"
TOKENS = 2_621_440  # law.toml's held-out budget, in the grid's laws after its check
SEQ_LEN = 128  # law.toml's [space.fixed] seq_len, as the grid ran it
TARGET = 1.5
NEAR_SD = 2.0
# trials after the predicted one: law.toml's 24, at 4.8 min a trial two at once (2.6M tokens at
# 8,192 per step, measured beside the test suite), were an hour a seed; 12 are 1.5x a grid cell's
# 8. (Quiet, a trial took 2.0 min: seed 0's.)
TRIALS = 12
NOTE_ATTR = "bench.note"


def seed_spec(seed: int, root: Path) -> Any:
    """law.toml as seed ``seed`` of the grid ran it, its held-out batch at the held-out
    budget."""
    from tuner.study.specs.spec import load_spec

    root.mkdir(parents=True, exist_ok=True)
    path = root / f"law-s{seed}.toml"
    path.write_text(spec_text(seed))
    spec = load_spec(path, overrides={"law.held_out_batch_budget": "held_out",
                                      "law.trials": TRIALS, "study.noise_top": 1})
    assert spec.law.held_out == TOKENS and spec.law.held_out_batch_at == TOKENS
    return spec


def prediction(seed: int) -> dict[str, Any]:
    """lr*(D, B) of seed ``seed``'s grid law at the held-out batch's cell, as
    `tuner.study.workflows.law` writes a held-out batch's prediction."""
    from tuner.modeling.laws.forms import read_lr_law
    from tuner.study.workflows.law import batch_prediction

    stored = read_json(GRID, {"seeds": {}})["seeds"].get(str(seed)) or {}
    if not stored.get("lr_batch_law"):
        raise SystemExit(f"{GRID}: no lr*(D, B) law stored for seed {seed}")
    law = read_lr_law(stored["lr_batch_law"])
    batch = float(stored_batch_end() * SEQ_LEN)
    return batch_prediction(law, TOKENS, batch) | {"n_cells": law.n_cells,
                                                    "law_tokens_range": list(law.tokens_range)}


def stored_batch_end() -> int:
    """law.toml's held-out batch (batch_end), as the grid ran it."""
    return int(read_json(GRID, {})["config"]["held_out_batch"])


def run_seed(seed: int, root: Path, predicted: dict[str, Any]) -> float:
    """Seed ``seed``'s held-out batch at the held-out budget, created with ``predicted`` or
    resumed: the seconds it ran here."""
    import optuna

    from trainers import train
    from tuner.study.run.runner import run_study
    from tuner.study.store import records
    from tuner.study.store import storage as st
    from tuner.study.trial.cluster import ray_cluster
    from tuner.study.workflows.law import budget_spec, snap

    spec = seed_spec(seed, root)
    point = {"lr": snap(spec.space.distributions()["lr"], predicted["lr"]),
             "batch_end": spec.law.held_out_batch}
    keep = ("tokens", "batch", "lr", "lr_band", "decades_past")
    bspec = budget_spec(spec, spec.law.held_out_batch_index,
                        predicted={k: predicted[k] for k in keep}, point=point)
    folder = root / "runs" / bspec.name
    folder.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{folder / 'study.db'}"
    store = st.storage_if_exists(url)
    exists = store is not None and st.find_study(bspec.name, store) is not None
    if store is None or st.find_study(spec.name, store) is None:
        # the law's base study, which a budget's run reads (a stop asked of the law reaches
        # its budgets through it): its spec only; its trials ran in the grid
        base = optuna.create_study(study_name=spec.name, storage=url, direction="minimize")
        base.set_user_attr(records.SPEC, budget_spec(spec, 0).to_dict())
        base.set_user_attr(NOTE_ATTR, "the grid's law, its budgets not kept here: only its "
                           "held-out batch at the held-out budget ran in this storage")
    if exists:  # the stored prediction is the one made before: never a new one
        stored = st.stored_spec(optuna.load_study(study_name=bspec.name, storage=url))
        if stored.law.predicted["lr"] != predicted["lr"]:
            raise SystemExit(f"{bspec.name}: its stored prediction differs from {OUT}'s")
    start = time.monotonic()
    with ray_cluster(None, spec):
        run_study(bspec, run_dir=folder, storage=url, resume=exists, trainer=train,
                  progress=False)
    return time.monotonic() - start


def seed_result(seed: int, root: Path) -> dict[str, Any] | None:
    """The product's check of the seed's held-out batch, with its trials; None before it."""
    import optuna

    from tuner.study.specs.law_spec import budget_name
    from tuner.study.store import storage as st
    from tuner.study.workflows.law_fit import fit_law

    spec = seed_spec(seed, root)
    i = spec.law.held_out_batch_index
    name = budget_name(spec.name, spec.law, i)
    path = root / "runs" / name / "study.db"
    if not path.exists():
        return None
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{path}")
    check = fit_law(st.stored_spec(study), [(i, study)]).held_out_batch_check()
    trials = sorted([t.params["lr"], t.values[0]] for t in study.trials if t.values)
    return {"check": check, "trials": trials, "n_trials": len(trials)}


def results_lines(data: dict[str, Any]) -> list[str]:
    """The RESULTS.md section: per seed, predicted [band] / measured at the cell, the
    whole-range quadratic beside it, the predicted recipe's cost; then the targets."""
    out = [f"Command: `{COMMAND} --seeds {' '.join(data['seeds']) or '0 1 2'}` "
           "(`benchmarks/law/held_batch.py`: law.toml's held-out batch, batch_end 64 = 8,192 "
           "tokens per step, run at its held-out budget of 2,621,440 tokens, 320 steps, with "
           "`law.held_out_batch_budget = \"held_out\"`; each seed's lr*(D, B) as "
           "benchmarks/law_grid.json stores it, through its five budgets' 12-14 cells; "
           f"{TRIALS} trials after the predicted one, real trainings). Measured: the trainings, "
           "the cell's lr* (a quadratic in log lr within 0.5 decades of its best trial, the "
           "predicted trial left out) and the "
           "whole-range quadratic beside it. Modeled: the prediction, made and committed before "
           "the seed's first trial.", "",
           "| seed | predicted [band] | measured [95%] | ratio | whole-range quadratic "
           "(ratio) | the predicted recipe's trial | grid's check at 64 steps (ratio) |",
           "|---|---|---|---|---|---|---|"]
    pre = data.get("preregistered", {})
    grid = read_json(GRID, {"seeds": {}})["seeds"]
    rows, ok, near, n = [], 0, 0, 0
    for seed, p in pre.items():
        d = (data["seeds"].get(seed) or {}).get("check")
        old = (grid.get(seed) or {}).get("held_out_batch_check") or {}
        was = f"{old['lr_ratio']:.2f}" if old else "-"
        if not d:
            out.append(f"| {seed} | {g(p['lr'])} [{g(p['lr_band'][0])}, {g(p['lr_band'][1])}] "
                       f"| not reached yet | | | | {was} |")
            continue
        n += 1
        ok += within(d["lr_ratio"], TARGET)
        sd = d.get("loss_gap_best_sd")
        near += sd is not None and sd <= NEAR_SD
        rows.append((d["lr_predicted"], d["lr_band"]))
        surf = d.get("lr_surface")
        out.append(
            f"| {seed} | {g(d['lr_predicted'])} [{g(d['lr_band'][0])}, {g(d['lr_band'][1])}] | "
            f"{g(d['lr_measured'])} [{g(d['lr_interval'][0])}, {g(d['lr_interval'][1])}]"
            + (" (on its window's edge: a bound)" if d["at_edge"] else "")
            + f" | {d['lr_ratio']:.2f} ({'inside' if d['lr_inside'] else 'outside'} the band) | "
            + (f"{g(surf)} ({d['lr_predicted'] / surf:.2f})" if surf else "-") + " | "
            + (f"{d['loss_gap_best']:+.3f} ({sd:.1f} noise sd) from the best searched"
               if sd is not None else "-") + f" | {was} |")
    inside, pairs = pairs_inside(rows)
    out += ["", f"- lr* within {TARGET}x: {ok} of {n} seeds; the predicted recipe within "
            f"{NEAR_SD:g} noise sd of the best searched: {near} of {n}; each seed's prediction "
            f"inside the other seeds' bands: {inside} of {pairs} pairs."]
    out += [f"- Seed {seed}'s trials (lr: val_loss): "
            + ", ".join(f"{g(lr)}: {loss:.3f}" for lr, loss in d["trials"]) + "."
            for seed, d in data["seeds"].items() if d and d.get("trials")]
    return out + [f"- {note}" for note in data.get("notes", [])]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--root", type=Path, default=ROOT / "runs" / "bench_law_held_batch")
    p.add_argument("--predict", action="store_true",
                   help="no trainings: write each seed's prediction (commit it before a run)")
    p.add_argument("--results", action="store_true", help="no trainings: JSON -> RESULTS.md")
    p.add_argument("--refit", action="store_true",
                   help="no trainings: read each seed back from its stored study")


def run(a: argparse.Namespace) -> int:
    data: dict[str, Any] = read_json(OUT, {"preregistered": {}, "seeds": {}, "notes": []})
    pre = data["preregistered"]
    if a.predict:
        for seed in a.seeds:
            pre.setdefault(str(seed), prediction(seed))  # a prediction once made stays
        write_json(OUT, data)
    elif not a.results:
        os.environ.setdefault("OMP_NUM_THREADS", "1")  # as `moetune submit` runs: a core a trial
        for seed in a.seeds:
            if str(seed) not in pre:
                raise SystemExit(f"seed {seed}: no prediction in {OUT}; run --predict and "
                                 "commit it first")
            if not a.refit:
                print(f"seed {seed} ...", file=sys.stderr, flush=True)
                wall = run_seed(seed, a.root, pre[str(seed)])
                data.setdefault("wall_s", {})[str(seed)] = wall
            data["seeds"][str(seed)] = seed_result(seed, a.root)
            write_json(OUT, data)
    from benchmarks.results_md import publish

    publish(HEADING, results_lines(data))
    return 0
