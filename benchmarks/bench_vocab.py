"""Does the byte corpus mislead? The same recipes trained on the same text as bytes, as BPE 8k
and as BPE 32k (issue 27): the best LR of each, and how alike their rankings are.

    python benchmarks/bench_vocab.py [--recipes 12] [--seeds 3] [--tokens 200000] [--jobs 2]
                                     [--corpora ...] [--add] [--out benchmarks/vocab.json]

The recipes are the quickstart's (search_spaces/quickstart.toml: its proxy, budget and fixed
knobs) with ``lr`` on a log grid across the quickstart's lr range and every other searched knob
at a fixed middle value (warmup_fraction 0.1, batch 16 sequences, fp32 (the fastest on a CPU), no
recompute), so the
rankings compare LRs: what a study of this space moves most. Each recipe trains ``--seeds``
model seeds on each corpus (`trainers.train` directly, one thread per job, ``--jobs`` at once):
trials of equal tokens, as the quickstart's are. A vocabulary changes what a token is, so
val_loss (nats per token) is compared only within a corpus: the result is each corpus' best LR
(the lowest seed-mean, and the minimum of a quadratic in log lr fitted to every run), the
Spearman correlation of the recipes' seed-means between corpora, and the seed noise (the pooled
sd of the seeds) to say whether a difference is larger than it. All measured on this machine;
``--out`` is rewritten after every run; ``--add`` keeps the runs already in it (same lrs and
tokens, or it refuses) and trains only those it lacks, so a corpus, more seeds or the rest of
an interrupted campaign can be measured in a later session.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
import tomllib
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CORPORA = {"bytes": None, "bpe-8k": "bpe:8192", "bpe-32k": "bpe:32768"}
FIXED = {"warmup_fraction": 0.1, "batch_end": 16, "precision": "fp32", "checkpoint_ratio": 0.0}


def spec_for(tokenizer: str | None, tokens: int) -> Any:
    from tuner.study.specs.spec import parse_spec

    table = tomllib.loads((ROOT / "search_spaces" / "quickstart.toml").read_text())
    table["study"]["name"] = "vocab"
    table["budget"]["tokens_per_trial"] = tokens
    table["budget"]["eval_every_tokens"] = tokens
    if tokenizer:
        table["data"]["tokenizer"] = tokenizer
    return parse_spec(table, base_dir=ROOT / "search_spaces")


def lr_grid(spec: Any, n: int) -> list[float]:
    d = spec.space.distributions()["lr"]
    return [float(x) for x in np.geomspace(d.low, d.high, n)]


def one_run(job: tuple[str, str | None, float, int, int]) -> dict[str, Any]:
    import torch

    from trainers import train
    from tuner.corpus.section import load_data
    from tuner.study.specs.proxy import resolve_model_args

    torch.set_num_threads(1)
    corpus, tokenizer, lr, seed, tokens = job
    spec = spec_for(tokenizer, tokens)
    params = {"lr": lr, **{k: v for k, v in FIXED.items() if k in spec.space.names()}}
    recipe = spec.space.to_recipe(params, seed=seed)
    t0 = time.perf_counter()
    result = train(resolve_model_args(spec), recipe, data=load_data(spec.data),
                   token_budget=tokens, seed=seed)
    return {"corpus": corpus, "lr": lr, "seed": seed, "val_loss": result.val_loss,
            "diverged": result.diverged, "vocab": resolve_model_args(spec).vocab_size,
            "seconds": time.perf_counter() - t0}


def spearman(a: list[float], b: list[float]) -> float:
    ra, rb = (np.argsort(np.argsort(x)) for x in (a, b))
    return float(np.corrcoef(ra, rb)[0, 1])


def best_lr(runs: list[dict[str, Any]]) -> dict[str, float]:
    """The lowest seed-mean's lr, and the minimum of a quadratic in log lr over every run
    (None when the fit has no interior minimum)."""
    by_lr: dict[float, list[float]] = {}
    for r in runs:
        if math.isfinite(r["val_loss"]):
            by_lr.setdefault(r["lr"], []).append(r["val_loss"])
    means = {lr: statistics.fmean(v) for lr, v in by_lr.items()}
    lowest = min(means, key=lambda k: means[k])
    x = np.log([r["lr"] for r in runs if math.isfinite(r["val_loss"])])
    y = np.array([r["val_loss"] for r in runs if math.isfinite(r["val_loss"])])
    c2, c1, _ = np.polyfit(x, y, 2)
    fit = float(math.exp(-c1 / (2 * c2))) if c2 > 0 else float("nan")
    inside = bool(c2 > 0 and x.min() <= math.log(fit) <= x.max()) if c2 > 0 else False
    return {"lowest_mean": lowest, "quadratic": fit, "quadratic_inside": inside}


def kept_runs(out: Path, lrs: list[float], seeds: int, tokens: int) -> list[dict[str, Any]]:
    """Every run in ``out``, after checking it holds this grid (its lrs and tokens, at most
    ``seeds`` seeds): ``--add`` then trains only the runs it lacks."""
    old = json.loads(out.read_text())
    s = old["summary"]
    same = (s["seeds"] <= seeds and s["tokens"] == tokens and len(s["lrs"]) == len(lrs)
            and all(math.isclose(a, b) for a, b in zip(s["lrs"], lrs)))
    if not same:
        raise SystemExit(f"--add: {out} holds another grid ({len(s['lrs'])} lrs, {s['seeds']} "
                         f"seeds, {s['tokens']} tokens); run with those or without --add")
    return list(old["runs"])


def summarize(runs: list[dict[str, Any]], lrs: list[float], seeds: int,
              tokens: int) -> dict[str, Any]:
    """Each corpus' best lr, seed noise and time per run, and the Spearman correlations of the
    recipes' seed-means between corpora (every corpus with a run of every lr)."""
    summary: dict[str, Any] = {"lrs": lrs, "seeds": seeds, "tokens": tokens, "fixed": FIXED,
                               "corpora": {}}
    means: dict[str, list[float]] = {}
    names = [c for c in CORPORA if {r["lr"] for r in runs if r["corpus"] == c} >= set(lrs)]
    for c in names:
        mine = [r for r in runs if r["corpus"] == c]
        per_lr = [[r["val_loss"] for r in mine if r["lr"] == lr] for lr in lrs]
        means[c] = [statistics.fmean(v) for v in per_lr]
        noise = math.sqrt(statistics.fmean([statistics.variance(v) for v in per_lr
                                            if len(v) > 1 and all(map(math.isfinite, v))]
                                           or [math.nan]))
        summary["corpora"][c] = {"vocab": mine[0]["vocab"], "best_lr": best_lr(mine),
                                 "seeds": len({r["seed"] for r in mine}),
                                 "mean_val_loss": means[c], "seed_sd": noise,
                                 "seconds_per_run": statistics.fmean(r["seconds"] for r in mine)}
    summary["spearman"] = {f"{a} vs {b}": spearman(means[a], means[b])
                           for i, a in enumerate(names) for b in names[i + 1:]}
    return summary


def save(out: Path, summary: dict[str, Any], runs: list[dict[str, Any]]) -> None:
    """Written whole to a temporary file, then renamed: a run killed mid-write loses nothing."""
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps({"summary": summary, "runs": runs}, indent=1) + "\n")
    tmp.replace(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipes", type=int, default=12)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=200_000)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--corpora", nargs="+", default=list(CORPORA), choices=list(CORPORA))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "vocab.json")
    ap.add_argument("--add", action="store_true",
                    help="keep every run already in --out (same lrs and tokens, at most --seeds "
                         "seeds) and train only those it lacks: another corpus, more seeds, or "
                         "the rest of an interrupted campaign")
    args = ap.parse_args()
    lrs = lr_grid(spec_for(None, args.tokens), args.recipes)
    kept = kept_runs(args.out, lrs, args.seeds, args.tokens) if args.add else []
    for name in args.corpora:  # tokenize (and train the BPE vocabulary) once, up front
        from tuner.corpus.section import load_data

        load_data(spec_for(CORPORA[name], args.tokens).data, progress=True)
    have = {(r["corpus"], r["lr"], r["seed"]) for r in kept}
    jobs = [(c, CORPORA[c], lr, s, args.tokens) for c in args.corpora for lr in lrs
            for s in range(1, args.seeds + 1) if (c, lr, s) not in have]
    runs: list[dict[str, Any]] = list(kept)
    t0 = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        for i, r in enumerate(pool.map(one_run, jobs), 1):
            runs.append(r)
            print(f"[{i}/{len(jobs)}] {r['corpus']} lr {r['lr']:.3g} seed {r['seed']}: val_loss "
                  f"{r['val_loss']:.4f} ({r['seconds']:.0f} s; {time.perf_counter() - t0:.0f} s "
                  "elapsed)", flush=True)
            # every finished run is kept: an interrupted campaign resumes with --add
            save(args.out, summarize(runs, lrs, args.seeds, args.tokens), runs)
    summary = summarize(runs, lrs, args.seeds, args.tokens)
    save(args.out, summary, runs)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
