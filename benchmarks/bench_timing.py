"""The timed cost against a trial's own tokens/s: one systems signature, two studies, a third busy.

Each round: a "third study" trains on the machine the whole time (two processes, one torch
thread each, `trainers.train` with every step holding the cores shared, as a study's trials
do). Meanwhile study A, then study B (each its own process, as a study's trial worker runs it,
each with its own timing scope, so neither reuses the other's timing) do what a trial of a timed
study does: `tuner.study.trial.timing.measure` (the probe, holding the cores exclusive: the third
study's trials pause at a step boundary) and then train the recipe with the gate, which gives
the trial's own tokens_per_s. A and B run one after the other while the third study runs, so
their own tokens/s see the machine as trials see it; the ratio A / B of the timed median
against the ratio of the trials' own tokens/s is the point.

The lock is a private one (``MOETUNE_CORES_LOCK`` under a temp dir): other users' moetune
studies on the machine do not pause for these probes, and their load is foreign load here.

With ``--sweep``, it first times (probe alone, nothing else of moetune running) the quickstart's
constant batch sizes in fp32 and bf16: the speed side of the quickstart's trade-off.

    python benchmarks/bench_timing.py --rounds 3            # prints a table and timing.json
    python benchmarks/bench_timing.py --rounds 3 --sweep --write    # also into RESULTS.md

Measured on whatever machine runs it; RESULTS.md says which, with `uptime`'s load.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing as mp
import os
import platform
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"
HEADING = "## Timed cost vs a trial's own tokens/s"
TOKENS = 200_000  # quickstart's budget
# the signatures: quickstart-like recipes (linear ramp from 8, debug proxy)
SIGNATURES = {
    "b32 bf16 ckpt0": {"batch_end": 32, "precision": "bf16", "checkpoint_ratio": 0.0},
    "b64 fp32 ckpt1": {"batch_end": 64, "precision": "fp32", "checkpoint_ratio": 1.0},
}
BACKGROUND = {"batch_end": 16, "precision": "fp32", "checkpoint_ratio": 0.5}


def _recipe(knobs: dict[str, Any], lr: float = 3e-3):
    from trainers import Recipe

    return Recipe(batch_schedule="linear", batch_start=8, batch_ramp_fraction=0.1,
                  seq_len=128, lr=lr, **knobs)


def _setup() -> None:
    import torch

    torch.set_num_threads(1)


def background(stop: Any) -> None:
    """Trials of the third study (50k tokens each), one after another, until ``stop`` is set."""
    _setup()
    from trainers import load_corpus, preset, train
    from tuner.study.trial.cores import machine_lock

    data, lock = load_corpus("stdlib"), machine_lock()
    while not stop.is_set():
        train(preset("debug"), _recipe(BACKGROUND), data=data, token_budget=50_000,
              eval_every_tokens=25_000, device="cpu", step_gate=lock.shared)


def study_trial(knobs: dict[str, Any], tokens: int, out: Any) -> None:
    """One trial of a timed study: its signature's timing (a probe: the scope is new), then its
    own training with the gate."""
    _setup()
    from trainers import load_corpus, preset, train
    from trainers.loop import StepTimer
    from tuner.study.trial import timing
    from tuner.study.trial.cores import machine_lock

    data, recipe, args = load_corpus("stdlib"), _recipe(knobs), preset("debug")
    t0 = time.monotonic()
    entry, source = timing.measure(args, recipe, token_budget=tokens, data=data, device="cpu",
                                   timer=StepTimer, scope=timing.new_scope())
    probe_wall = time.monotonic() - t0
    res = train(args, recipe, data=data, token_budget=tokens, eval_every_tokens=tokens // 4,
                device="cpu", step_gate=machine_lock().shared)
    out.put({"source": source, "timed": entry["tokens_per_s"], "spread": entry["spread"],
             "repeats": len(entry["repeats"]), "clock": entry["clock"],
             "probe_wall_s": round(probe_wall, 1), "signature": entry["signature"],
             "own": res.tokens_per_s, "val_loss": res.val_loss})


SWEEP_BATCHES = (2, 4, 8, 16, 32, 64)


def sweep(tokens: int) -> list[dict[str, Any]]:
    """The probe's tokens/s of constant batches in fp32 and bf16 (no checkpointing)."""
    _setup()
    from trainers import Recipe, load_corpus, preset
    from trainers.loop import StepTimer
    from tuner.study.trial import timing
    data, rows = load_corpus("stdlib"), []
    for precision in ("fp32", "bf16"):
        for n in SWEEP_BATCHES:
            r = Recipe(batch_schedule="constant", batch_end=n, precision=precision)
            e = timing.probe(preset("debug"), r, token_budget=tokens, data=data, device="cpu",
                             timer=StepTimer, clock="cpu")
            rows.append({"precision": precision, "batch": n, "tokens_per_s": e["tokens_per_s"],
                         "spread": e["spread"], "repeats": len(e["repeats"])})
            print(f"sweep {precision} batch {n}: {e['tokens_per_s']:.0f} tok/s "
                  f"(spread {e['spread']:.1%})", flush=True)
    return rows


def _uptime() -> str:
    out = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    m = re.search(r"load average: (.*)", out)
    return m.group(1) if m else out


def run(rounds: int, tokens: int, *, with_sweep: bool) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    lock_dir = tempfile.mkdtemp(prefix="moetune-bench-lock-")
    os.environ["MOETUNE_CORES_LOCK"] = str(Path(lock_dir) / "cores")  # inherited by children
    loads = [_uptime()]
    swept = sweep(tokens) if with_sweep else []
    rows: list[dict[str, Any]] = []
    for r in range(rounds):
        for name, knobs in SIGNATURES.items():
            stop = ctx.Event()
            third = [ctx.Process(target=background, args=(stop,)) for _ in range(2)]
            for p in third:
                p.start()
            time.sleep(5)  # the third study's trials are training
            pair = {}
            for study in ("A", "B"):
                q = ctx.Queue()
                p = ctx.Process(target=study_trial, args=(knobs, tokens, q))
                p.start()
                pair[study] = q.get()
                p.join()
            stop.set()
            for p in third:
                p.join()
            row = {"round": r + 1, "signature": name, "A": pair["A"], "B": pair["B"],
                   "timed_ratio": pair["A"]["timed"] / pair["B"]["timed"],
                   "own_ratio": pair["A"]["own"] / pair["B"]["own"], "load": _uptime()}
            print(_line(row), flush=True)
            rows.append(row)
            loads.append(row["load"])
    return {"date": dt.date.today().isoformat(), "machine": _machine(), "tokens": tokens,
            "rows": rows, "loads": loads, "summary": _summary(rows), "sweep": swept}


def _machine() -> str:
    from tuner.study.trial.timing import cpu_model

    return f"{cpu_model()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    timed = [abs(r["timed_ratio"] - 1) for r in rows]
    own = [abs(r["own_ratio"] - 1) for r in rows]
    spreads = [r[s]["spread"] for r in rows for s in ("A", "B")]
    return {"timed_max_diff": max(timed), "timed_median_diff": statistics.median(timed),
            "own_max_diff": max(own), "own_median_diff": statistics.median(own),
            "spread_median": statistics.median(spreads), "spread_max": max(spreads)}


def _line(r: dict[str, Any]) -> str:
    a, b = r["A"], r["B"]
    return (f"round {r['round']} {r['signature']}: timed A {a['timed']:.0f} (spread "
            f"{a['spread']:.1%}, {a['repeats']} repeats) B {b['timed']:.0f} ({b['spread']:.1%}, "
            f"{b['repeats']}) A/B {r['timed_ratio']:.3f} | own A {a['own']:.0f} B {b['own']:.0f} "
            f"A/B {r['own_ratio']:.3f} | load {r['load']}")


def markdown(res: dict[str, Any], command: str) -> str:
    s = res["summary"]
    lines = [HEADING, "",
             f"Measured {res['date']} on {res['machine']}. Command: `{command}`. Load average "
             f"(`uptime`: 1, 5, 15 min) before: {res['loads'][0]}; after each row: in the "
             "table. Other users' jobs shared the machine throughout (their load is not paused "
             "by the benchmark's private lock).", "",
             f"Per row: a third study's two trials train the `debug` proxy on the machine the "
             f"whole time (every step holding the cores shared); study A, then study B, each "
             f"run one trial of the signature ({res['tokens']:,} tokens, linear ramp from 8, one "
             "torch thread): the probe (`tuner.study.trial.timing.measure`, a new scope each: no "
             "reuse), then the trial's own training. **timed** = the probe's median tokens/s "
             "(CPU clock at one thread), with its spread ((max − min) / median of the repeats); "
             "**own** = the trial's own tokens_per_s, the noisy reference.", "",
             "| round | signature | timed A | timed B | timed A/B | own A | own B | own A/B "
             "| load after |", "|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        a, b = r["A"], r["B"]
        lines.append(
            f"| {r['round']} | {r['signature']} | {a['timed']:,.0f} ({a['spread']:.1%}, "
            f"{a['repeats']}×) | {b['timed']:,.0f} ({b['spread']:.1%}, {b['repeats']}×) | "
            f"{r['timed_ratio']:.3f} | {a['own']:,.0f} | {b['own']:,.0f} | "
            f"{r['own_ratio']:.3f} | {r['load']} |")
    lines += ["", f"Timed A vs B: largest difference {s['timed_max_diff']:.1%}, median "
              f"{s['timed_median_diff']:.1%} (target <= 5%). The trials' own tokens/s: largest "
              f"{s['own_max_diff']:.1%}, median {s['own_median_diff']:.1%}. Spread of a probe's "
              f"repeats: median {s['spread_median']:.1%}, largest {s['spread_max']:.1%}.", ""]
    if res["sweep"]:
        by = {(r["precision"], r["batch"]): r for r in res["sweep"]}
        lines += ["The speed side of the quickstart's trade-off: the probe's tokens/s (CPU clock, "
                  "one thread, median of repeats, spread in brackets) of a constant batch of "
                  f"n × 128 tokens, `debug` proxy, no recompute, timed first (load before: "
                  f"{res['loads'][0]}).", "",
                  "| precision | " + " | ".join(f"n = {n}" for n in SWEEP_BATCHES) + " |",
                  "|---|" + "---|" * len(SWEEP_BATCHES)]
        for prec in ("fp32", "bf16"):
            lines.append(f"| {prec} | " + " | ".join(
                f"{by[prec, n]['tokens_per_s']:,.0f} ({by[prec, n]['spread']:.0%})"
                for n in SWEEP_BATCHES) + " |")
        lines.append("")
    return "\n".join(lines)


def write_results(text: str) -> None:
    old = RESULTS.read_text()
    if HEADING in old:
        start = old.index(HEADING)
        nxt = old.find("\n## ", start + len(HEADING))
        old = old[:start] + text + ("\n" + old[nxt + 1:] if nxt != -1 else "")
        RESULTS.write_text(old)
    else:
        RESULTS.write_text(old.rstrip("\n") + "\n\n" + text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tokens", type=int, default=TOKENS)
    p.add_argument("--sweep", action="store_true", help="first time the quickstart's batches")
    p.add_argument("--write", action="store_true", help="add the table to RESULTS.md")
    p.add_argument("--json", type=Path, default=HERE / "timing.json", help="where the figures go")
    args = p.parse_args()
    res = run(args.rounds, args.tokens, with_sweep=args.sweep)
    args.json.write_text(json.dumps(res, indent=2) + "\n")
    command = "python benchmarks/bench_timing.py --rounds " + str(args.rounds) + (
        f" --tokens {args.tokens}" if args.tokens != TOKENS else "") + (
        " --sweep" if args.sweep else "") + " --write"
    text = markdown(res, command)
    print(text)
    if args.write:
        write_results(text)


if __name__ == "__main__":
    main()
