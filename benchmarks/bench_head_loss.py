"""The head's cross-entropy a slice at a time against the logits held whole, in a real step.

    python benchmarks/bench_head_loss.py [--vocabs 8192 32768 129280] [--batch 16] [--steps 5]

One training step of the debug proxy (the quickstart's: seq 128, fp32, one torch thread, as a
trial with cpus_per_trial = 1 runs) at each vocabulary, through `train`'s own loop
(`trainers.loop.StepTimer`), with the sliced loss (trainers.nn.head_loss, what a vocabulary of
FUSED_MIN_VOCAB or more now uses) and with the plain `F.cross_entropy` over whole logits. The two
alternate step by step in one process, so a busy machine slows both alike; the figure is the
ratio of their median thread CPU seconds per step. Memory: the bytes autograd saved in one step
and the peak (parameters, gradients, optimizer state and saved activations: the CPU's exact
count, what `max_peak_memory_gb` constrains), from a one-step `train` of each. All measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import trainers.nn.model as model_module  # noqa: E402
from benchmarks.results_md import publish  # noqa: E402
from trainers import Recipe, preset, train  # noqa: E402
from trainers.data import Corpus  # noqa: E402
from trainers.loop import StepTimer  # noqa: E402
from trainers.nn.head_loss import FUSED_MIN_VOCAB  # noqa: E402

HEADING = "## The head's loss a slice at a time (subword vocabularies)"


def corpus(vocab: int) -> Corpus:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (200_000,), generator=g, dtype=torch.int32)
    return Corpus(tokens=ids, vocab_size=vocab, name=f"random-{vocab}", hash="0" * 64)


def plain_path(on: bool) -> None:
    """The plain loss for every vocabulary (on) or the product's rule (off)."""
    model_module.FUSED_MIN_VOCAB = 1 << 40 if on else FUSED_MIN_VOCAB  # type: ignore[misc]


def measure(vocab: int, batch: int, steps: int) -> dict[str, float]:
    args = dataclasses.replace(preset("debug"), vocab_size=vocab)
    recipe = Recipe(batch_schedule="constant", batch_start=batch, batch_end=batch,
                    precision="fp32")
    data = corpus(vocab)
    out: dict[str, float] = {}
    timers = {}
    for plain in (True, False):
        plain_path(plain)
        res = train(args, recipe, data=data, token_budget=batch * recipe.seq_len,
                    eval_sequences=batch, device="cpu")
        out[f"act_{plain}"], out[f"peak_{plain}"] = res.activation_bytes, res.peak_memory_bytes
        timers[plain] = StepTimer(args, recipe, data=data, device="cpu")
    cpu: dict[bool, list[float]] = {True: [], False: []}
    for i in range(steps + 1):  # the first step of each warms up, not counted
        for plain in (True, False):
            plain_path(plain)
            t = timers[plain].step(batch)
            if i:
                cpu[plain].append(t.cpu_s)
    plain_path(False)
    out["s_plain"], out["s_sliced"] = (statistics.median(cpu[p]) for p in (True, False))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vocabs", type=int, nargs="+", default=[8192, 32768, 129280])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=5)
    a = p.parse_args()
    torch.set_num_threads(1)
    gib = 2.0 ** 30
    rows = []
    for v in a.vocabs:
        m = measure(v, a.batch, a.steps)
        print(v, m, file=sys.stderr, flush=True)
        rows.append(f"| {v:,} | {m['s_plain']:.2f} | {m['s_sliced']:.2f} | "
                    f"{m['s_plain'] / m['s_sliced']:.2f}x | {m['act_True'] / gib:.3f} | "
                    f"{m['act_False'] / gib:.3f} | {m['peak_True'] / gib:.3f} | "
                    f"{m['peak_False'] / gib:.3f} |")
    cmd = "python benchmarks/bench_head_loss.py " + " ".join(sys.argv[1:])
    publish(HEADING, [
        f"Command: `{cmd.strip()}` (debug proxy, batch {a.batch} x 128 tokens, fp32, one torch "
        f"thread; median of {a.steps} steps each, alternating in one process). Measured.",
        "",
        "| vocab | s/step, logits whole | s/step, sliced | speed-up | saved GiB, whole | "
        "saved GiB, sliced | peak GiB, whole | peak GiB, sliced |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
    ])


if __name__ == "__main__":
    main()
