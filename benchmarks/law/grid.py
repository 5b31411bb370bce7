"""The shipped law design on real trainings, over seeds: `search_spaces/law.toml` exactly as it
ships (a grid of budgets x batches, lr*(D, B) through its cells, a held-out budget and a
held-out batch, each predicted before it runs, then searched): does lr*(D, B) predict both, and
do the seeds agree?

Each seed's spec is law.toml's text with two lines changed, ``name = "law-s{seed}"`` and
``seed = {seed}`` (`spec_text`; ``moetune resume`` refuses a spec that differs from the stored
one, so the rule is fixed). It runs through ``moetune submit`` (``resume`` when its study
exists: resumable), then its law is read back from the stored studies
(`reports.laws.law.law_data`) into benchmarks/law_grid.json with the wall seconds this invocation
ran it for (a resumed seed's wall is partial: earlier runs' time is not known), and
benchmarks/RESULTS.md's section "The shipped law design on real trainings" is written: per seed
the lr*(D, B) coefficients, the held-out budget's and the held-out batch's predicted / measured
lr* with their bands, the wall; then the targets (each held-out lr* within 1.5x, each seed's
predictions inside the other seeds' bands). A seed not finished prints "not reached yet".
A seed whose study is running elsewhere (seed 0 was started by hand under runs/bench_law_grid)
is left to it: pass ``--seeds`` for the others, and ``--refit`` reads it as far as it went.

    nice -n 15 python benchmarks/bench_law.py grid     # real trainings (~1 h 45 min a seed)
    python benchmarks/bench_law.py grid --seeds 1      # one seed
    python benchmarks/bench_law.py grid --results      # no trainings: JSON -> RESULTS.md
    python benchmarks/bench_law.py grid --refit        # no trainings: read the stored studies
    python benchmarks/bench_law.py grid --smoke        # law.toml small, the fake: ~3 min
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

from benchmarks.law.common import (
    BENCH,
    ROOT,
    db_path,
    g,
    pairs_inside,
    read_json,
    stored_law_data,
    submit_or_resume,
    within,
    write_json,
)

OUT = BENCH / "law_grid.json"
HEADING = ("## The shipped law design on real trainings: lr*(D, B) over a grid, held out in "
           "budget and batch")
COMMAND = "nice -n 15 python benchmarks/bench_law.py grid"
TARGET = 1.5  # each held-out lr* predicted within 1.5x of the measured
NEAR_SD = 2.0  # the predicted recipe's trial within this many noise sd of the best searched
# --smoke: law.toml with these lines changed too ([law] tokens and held_out, [study] n_trials),
# trained by the known-law fake over the grid; 18 trials are 6 per (budget, batch) cell, the
# fewest a cell's lr optimum is placed from (`response_surface.MIN_TRIALS`): with fewer no
# lr*(D, B) is fitted and the study stops before its held-out batch (~3 min on 2 busy cores)
SMOKE = {"tokens": [8_192, 24_576, 73_728, 262_144], "held_out": 1_310_720, "n_trials": 18}
SMOKE_TRAINER = "tuner.testing:law_batch_train"
NOT_STARTED = {"lr_batch_law": None, "lr_batch_note": "study not started",
               "held_out_check": None, "held_out_batch_check": None}


def spec_text(seed: int, smoke: dict[str, Any] | None = None) -> str:
    """law.toml's text with its ``[study]`` name and seed lines set to ``law-s{seed}`` and
    ``seed``, nothing else; with ``smoke``, its ``[law]`` tokens and held_out and ``[study]``
    n_trials lines set to those values too."""
    edits = {("[study]", "name"): f'name = "law-s{seed}"', ("[study]", "seed"): f"seed = {seed}"}
    if smoke:
        edits |= {("[law]", "tokens"): "tokens = [" + ", ".join(map(str, smoke["tokens"])) + "]",
                  ("[law]", "held_out"): f"held_out = {smoke['held_out']}",
                  ("[study]", "n_trials"): f"n_trials = {smoke['n_trials']}"}
    out, section = [], ""
    for line in (ROOT / "search_spaces" / "law.toml").read_text().splitlines(keepends=True):
        if line.startswith("["):
            section = line.strip()
        new = edits.get((section, line.split("=", 1)[0].strip()))
        out.append(line if new is None or line.startswith("#")
                   else new + line[len(line.rstrip("\n")):])
    return "".join(out)


def run_seed(seed: int, root: Path, smoke: dict[str, Any] | None) -> tuple[float, bool]:
    """Seed ``seed``'s study through ``moetune submit`` (``resume`` when it exists under
    ``root``): the seconds it ran, and whether it was resumed."""
    root.mkdir(parents=True, exist_ok=True)
    spec_path = root / f"law-s{seed}.toml"
    text = spec_text(seed, smoke)
    if spec_path.exists() and tomllib.loads(spec_path.read_text()) != tomllib.loads(text):
        raise SystemExit(f"{spec_path} is not law.toml with its name and seed set (`spec_text`);"
                         " resume would refuse it: move it away first")
    spec_path.write_text(text)  # the same settings; law.toml's comments may have moved on
    resumed = db_path(root, seed).exists()
    start = time.monotonic()
    submit_or_resume(f"law-s{seed}", spec_path, root,
                     ("--trainer", SMOKE_TRAINER) if smoke else ())
    return time.monotonic() - start, resumed


def read_seed(seed: int, root: Path) -> dict[str, Any] | None:
    """The seed's law data from its stored studies, as far as they go (None before its study
    exists; a law not fitted yet says why, in ``lr_batch_note``), with its trials' busy time."""
    try:
        data = stored_law_data(seed, root)
    except (ValueError, KeyError, RuntimeError) as e:  # a study caught before its first trials
        return NOT_STARTED | {"lr_batch_note": f"not readable yet ({e})"}
    return data if data is None else data | {"busy_s": busy_seconds(seed, root),
                                             "fitted_bend": fitted_bend(seed, root)}


def fitted_bend(seed: int, root: Path) -> dict[str, float] | None:
    """The bend in D (the u² term of the band's alternative law) of lr*(D, B) through the
    fitted budgets alone, the law that made the held-out predictions: its coefficient, se and
    the share the band believed it in. Positive: lr* flattening with D inside the grid, so a
    fall past it was not in the cells to see. None before that law is fitted."""
    import optuna

    from tuner.study.store import storage as st
    from tuner.study.workflows.law_fit import budget_studies, fit_law

    url = f"sqlite:///{db_path(root, seed)}"
    spec = st.stored_spec(optuna.load_study(study_name=f"law-s{seed}", storage=url))
    studies = budget_studies(spec, optuna.storages.RDBStorage(url))
    law = fit_law(spec, [(i, s) for i, s in studies if i < len(spec.law.tokens)]).lr_batch
    if law is None:
        return None
    return {"uu": law.form[-1], "se": math.sqrt(max(law.form_cov[-1][-1], 0.0)),
            "shrink": law.bend_shrink}


def busy_seconds(seed: int, root: Path) -> float:
    """The seconds during which at least one of the seed's trials ran, from the trials' stored
    start and end times over every stage (the union of their intervals): known however often
    the seed was stopped and resumed, and a lower bound on its wall (Ray's start, the noise
    re-trainings and the fits between stages are not in it)."""
    import optuna

    storage = f"sqlite:///{db_path(root, seed)}"
    spans = sorted((t.datetime_start.timestamp(), t.datetime_complete.timestamp())
                   for summary in optuna.get_all_study_summaries(storage)
                   for t in optuna.load_study(study_name=summary.study_name,
                                              storage=storage).get_trials(deepcopy=False)
                   if t.datetime_start is not None and t.datetime_complete is not None)
    total, end = 0.0, -math.inf
    for a, b in spans:
        total += max(0.0, b - max(a, end))
        end = max(end, b)
    return total


def campaign(seeds: list[int], root: Path, out: Path, *, train: bool,
             smoke: dict[str, Any] | None = None) -> dict[str, Any]:
    """Each seed run (``train``) or only read back, into ``out`` after each seed."""
    data: dict[str, Any] = read_json(out, {"seeds": {}})
    spec = tomllib.loads(spec_text(0, smoke))
    data["config"] = {"tokens": spec["law"]["tokens"], "held_out": spec["law"]["held_out"],
                      "batches": spec["law"]["batches"],
                      "held_out_batch": spec["law"]["held_out_batch"],
                      "held_out_batch_budget": spec["law"].get("held_out_batch_budget",
                                                               "largest"),
                      "trials": spec["study"]["n_trials"],
                      "trainer": SMOKE_TRAINER if smoke else "trainers.train (real)"}
    for seed in seeds:
        old = data["seeds"].get(str(seed), {})
        wall = {k: v for k, v in old.items() if k in ("wall_s", "wall_complete")}
        if train:
            print(f"seed {seed} ...", file=sys.stderr, flush=True)
            seconds, resumed = run_seed(seed, root, smoke)
            if not (resumed and old.get("wall_complete")):
                wall = {"wall_s": seconds, "wall_complete": not resumed}
        law = read_seed(seed, root)
        if law is not None or not old:
            data["seeds"][str(seed)] = (law or NOT_STARTED) | wall
            write_json(out, data)
    return data


def _coefficients(d: dict[str, Any]) -> str:
    """lr*(D, B)'s coefficients and exponents at the fitted ranges' ends."""
    from tuner.modeling.laws.lr_batch_law import LrBatchLaw

    if not d.get("lr_batch_law"):
        return f"not fitted yet ({d.get('lr_batch_note') or 'no cells'})"
    law = LrBatchLaw.from_dict(d["lr_batch_law"])
    (d0, d1), (b0, b1) = law.tokens_range, law.batch_range
    coef = ", ".join(f"{t}: {c:+.3f}" for t, c in zip(law.terms, law.coef))
    return (f"log10 lr* = {coef} (u = log10 D − {law.centre[0]:.2f}, v = log10 B − "
            f"{law.centre[1]:.2f}); D-exp {law.tokens_exponent(b0):+.2f} at B {b0:.0f}, "
            f"{law.tokens_exponent(b1):+.2f} at B {b1:.0f}; B-exp {law.batch_exponent(d0):+.2f}"
            f" at D {d0:.0f}, {law.batch_exponent(d1):+.2f} at D {d1:.0f}; {law.n_cells} cells, "
            f"τ {law.tau:.2g}")


def _check(h: dict[str, Any] | None) -> str:
    """A held-out check's predicted [band] / measured = ratio (inside or outside its band)."""
    if not h:
        return "not reached yet"
    surface = h.get("lr_surface")
    at = f"; at {h['tokens']:,} tokens" if "batch" in h and "tokens" in h else ""
    return (f"{g(h['lr_predicted'])} [{g(h['lr_band'][0])}, {g(h['lr_band'][1])}] / "
            f"{g(h['lr_measured'])} = {h['lr_ratio']:.2f} "
            f"({'inside' if h['lr_inside'] else 'outside'}{at})"
            + ("; its optimum on its window's edge (a flat bowl): a bound, not judged"
               if h.get("at_edge") else "")
            + (f"; the whole-range quadratic: {g(surface)} = "
               f"{h['lr_predicted'] / surface:.2f}" if surface else "")
            + (f"; the predicted recipe's trial {h['loss_gap_best']:+.3f} "
               f"({h['loss_gap_best_sd']:+.1f} sd) from the best searched"
               if "loss_gap_best" in h else ""))


def _wall(d: dict[str, Any]) -> str:
    busy = (f"; trials' busy time {d['busy_s'] / 60:.0f} min (stored timestamps, every run)"
            if d.get("busy_s") else "")
    if "wall_s" not in d:
        return "unknown (not run by this benchmark)" + busy
    return f"{d['wall_s'] / 60:.1f} min" + (
        "" if d["wall_complete"] else " (partial: resumed, earlier runs' time unknown)") + busy


def results_lines(data: dict[str, Any], *, command: str = COMMAND) -> list[str]:
    cfg, seeds = data["config"], data["seeds"]
    lines = [f"Command: `{command}` ({cfg['trainer']}; `search_spaces/law.toml` as shipped, its "
             f"name and seed set per seed: budgets {cfg['tokens']} tokens, batch_end "
             f"{cfg['batches']} sequences of 128 tokens searched at each, {cfg['trials']} "
             f"trials per budget, the held-out budget {cfg['held_out']} tokens and the "
             f"held-out batch {cfg['held_out_batch']} sequences at the budget each seed's "
             "law.toml named (`held_out_batch_budget`: the largest fitted before seed 3, the "
             "held-out one from seed 3 on; each check says its tokens), each "
             "predicted before it ran, then searched). Measured: the trainings, each budget's "
             "and the held-out batch's lr* (the quadratic through its own trials), the wall. "
             "Modeled: lr*(D, B) through the cells, its predictions and bands (the predictions "
             "were made from the fitted cells before the held-out runs; the coefficients are "
             "the law as it stands, the held-out budget's cells joined once its check is "
             "made).", "",
             "| seed | lr*(D, B) | held-out budget: lr pred [band] / measured | per batch "
             "(pred / measured) | held-out batch: lr pred [band] / measured | wall |",
             "|---|---|---|---|---|---|"]
    for seed, d in sorted(seeds.items()):
        cells = ", ".join(f"{c['batch']:.0f}: {g(c.get('lr_ratio'), '.2f')}"
                          + (" (flat bowl: no optimum placed)" if c.get("at_edge") else "")
                          for c in (d.get("held_out_check") or {}).get("cells", [])) or "—"
        lines.append(f"| {seed} | {_coefficients(d)} | {_check(d.get('held_out_check'))} | "
                     f"{cells} | {_check(d.get('held_out_batch_check'))} | {_wall(d)} |")
    return (lines + [""] + _targets(seeds) + _past_grid(seeds) + [""]
            + ["- " + n for n in data.get("notes", [])])


def _past_grid(seeds: dict[str, Any]) -> list[str]:
    """Per seed, how lr* moved from the largest fitted budget to the held-out one against the
    law: the judged cells' predicted / measured and the D-exponent each would have needed beyond
    the law's (log10 of the ratio over the decades between them), beside the fitted cells' own
    bend in D."""
    rows, spans = [], set()
    for seed, d in sorted(seeds.items()):
        h, bend = d.get("held_out_check") or {}, d.get("fitted_bend")
        judged = [c for c in h.get("cells", []) if "lr_ratio" in c and not c.get("at_edge")
                  and not c.get("censored")]
        if not judged or not bend:
            continue
        span = math.log10(h["tokens"] / max(b["tokens"] for b in d["budgets"]
                                            if not b["held_out"] and not b["held_out_batch"]))
        spans.add(f"{span:.2f}")
        steeper = ", ".join(f"{c['batch']:.0f}: {c['lr_ratio']:.2f}x, "
                            f"{-math.log10(c['lr_ratio']) / span:+.2f}" for c in judged)
        rows.append(f"seed {seed}: {steeper}; the fitted cells' bend {bend['uu']:+.3f} ± "
                    f"{bend['se']:.3f} (believed in {bend['shrink']:.0%})")
    if not rows:
        return []
    return ["- Past the grid, per batch at the held-out budget (lr*(D, B) predicted / measured, "
            "and the D-exponent beyond the law's that the fall would need over the "
            f"{'/'.join(sorted(spans))} decades from the largest fitted budget; measured cells "
            "only, a flat or edge bowl not judged): " + "; ".join(rows) + ". A positive bend "
            "is lr* flattening with D inside the grid: the fall past it is not in the fitted "
            "cells."]


def _targets(seeds: dict[str, Any]) -> list[str]:
    out = []
    for key, what in (("held_out_check", "held-out budget"),
                      ("held_out_batch_check", "held-out batch")):
        checks = [d[key] for d in seeds.values() if d.get(key)]
        if not checks:
            out.append(f"- {what}: not reached yet (0 of {len(seeds)} seeds).")
            continue
        n = len(checks)
        ok = sum(within(c["lr_ratio"], TARGET) for c in checks)
        own = sum(c["lr_inside"] for c in checks)
        inside, pairs = pairs_inside([(c["lr_predicted"], c["lr_band"]) for c in checks])
        others = (f"each seed's prediction inside the other seeds' bands: {inside}/{pairs} "
                  "pairs" if pairs else "one seed: no cross-seed check")
        late = f"; {len(seeds) - n} seed(s) not reached yet" if n < len(seeds) else ""
        near = [c for c in checks if "loss_gap_best_sd" in c]
        close = sum(c["loss_gap_best_sd"] <= NEAR_SD for c in near)
        cost = (f"; the predicted recipe's own trial within {NEAR_SD:g} noise sd of the best "
                f"searched in {close}/{len(near)} (proposed target: what following the "
                "prediction cost, where a flat bowl leaves lr* unpinned)" if near else "")
        out.append(f"- {what}: lr* predicted within {TARGET}x of the measured in {ok}/{n} "
                   f"seeds (target {n}/{n}); the measured inside its own band in {own}/{n}; "
                   f"{others}{cost}{late}.")
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--root", type=Path, default=None,
                   help="where the seeds' studies live (default runs/bench_law_grid; with "
                        "--smoke a new temporary folder), kept so a rerun resumes")
    p.add_argument("--results", action="store_true", help="no trainings: JSON -> RESULTS.md")
    p.add_argument("--refit", action="store_true",
                   help="no trainings: read each seed's law back from its stored studies "
                        "(a seed still running: as far as it went)")
    p.add_argument("--smoke", action="store_true",
                   help=f"law.toml at small sizes, trained by {SMOKE_TRAINER}: seconds; prints "
                        "the section, writes ROOT/law_grid.json, not RESULTS.md")


def run(a: argparse.Namespace) -> int:
    if a.smoke:
        root = a.root or Path(tempfile.mkdtemp(prefix="moetune-law-grid-smoke-"))
        print(f"smoke: studies and law_grid.json under {root}", file=sys.stderr)
        data = campaign(a.seeds, root, root / "law_grid.json", train=True, smoke=SMOKE)
        print("\n".join(results_lines(data, command="python benchmarks/bench_law.py grid "
                                      "--smoke")))
        return 0
    root = a.root or ROOT / "runs" / "bench_law_grid"
    data = (read_json(OUT, {"seeds": {}}) if a.results
            else campaign(a.seeds, root, OUT, train=not a.refit))
    if "config" not in data:
        raise SystemExit(f"{OUT} has no results yet: run the trainings or --refit first")
    from benchmarks.results_md import publish

    publish(HEADING, results_lines(data))
    return 0
