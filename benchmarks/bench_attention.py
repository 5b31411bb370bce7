"""The attention core on CPU: our fused and blocked kernels against PyTorch's SDPA, side by side.

One MLA layer's causal attention, forward + backward, at proxy-s head shapes (18 heads, q/k head
dim 24, v head dim 16), 2048 tokens per call (batch = 2048 / seq_len), in four versions run
alternately in one process:

- fused: `trainers.nn.fused_attention.FusedCausalAttention`, the C++ kernel the proxy runs on CPU
  up to `FUSED_MAX_SEQ` tokens;
- blocked: `trainers.nn.attention.BlockedCausalAttention`, the PyTorch-ops kernel it falls back to
  without a compiler (up to `BLOCKED_MAX_SEQ`);
- sdpa (flash): v zero-padded to the q/k head dim so SDPA takes its CPU flash kernel (what the
  proxy runs past those lengths);
- sdpa (math): unpadded, so SDPA falls back to bmm + softmax with autograd (what transformers'
  DeepseekV3 runs with attn_implementation="sdpa").
Past 1024 tokens only fused and flash run (the other two keep or loop over (T, T) tensors);
at 4096 a call is one sequence (4096 tokens).

    python benchmarks/bench_attention.py [--threads 2] [--repeats 15] [--write]

Then the end-to-end effect: `trainers.train` tokens/s of the `debug` proxy (fp32, bf16 and
emulated fp8; batch 16 x 128) with each kernel, alternating runs.

--write replaces the "## Attention core (CPU)" section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trainers import Recipe, attention, preset, train  # noqa: E402
from trainers.nn.fused_attention import FusedCausalAttention  # noqa: E402

HEADS, QK_DIM, V_DIM, TOKENS = 18, 24, 16, 2048
SCALE = QK_DIM ** -0.5


# Each takes head-major (B, H, T, D) views of token-major tensors, as MLA passes them.
def _fused(q, k, v):
    return FusedCausalAttention.apply(q, k, v, SCALE)


def _blocked(q, k, v):
    b, h, t, _ = q.shape
    heads = [x.reshape(b * h, t, x.shape[-1]) for x in (q, k, v)]
    return attention.BlockedCausalAttention.apply(*heads, SCALE).view(b, h, t, -1)


def _sdpa_flash(q, k, v):
    return attention._padded_sdpa(q, k, v, SCALE)


def _sdpa_math(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=SCALE)


VARIANTS = {"fused": _fused, "blocked": _blocked, "sdpa (flash)": _sdpa_flash,
            "sdpa (math)": _sdpa_math}
LONG_ROWS = 1024  # beyond this only fused and flash are measured


def measure(seq_len: int, dtype: torch.dtype, repeats: int) -> dict:
    """Median ms of forward + backward per variant, alternating so noise hits all alike."""
    batch = max(1, TOKENS // seq_len)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(batch, seq_len, HEADS, d, generator=g).to(dtype).requires_grad_()
               for d in (QK_DIM, QK_DIM, V_DIM))
    grad_out = torch.randn(batch, seq_len, HEADS, V_DIM, generator=g).to(dtype)
    variants = {name: fn for name, fn in VARIANTS.items()
                if seq_len <= LONG_ROWS or name in ("fused", "sdpa (flash)")}
    times = {name: [] for name in variants}
    for i in range(repeats + 1):
        for name, fn in variants.items():
            t0 = time.perf_counter()
            out = fn(*(x.transpose(1, 2) for x in (q, k, v))).transpose(1, 2)
            torch.autograd.grad(out, (q, k, v), grad_out)
            if i:  # the first round warms up
                times[name].append(time.perf_counter() - t0)
    return {"seq_len": seq_len, "dtype": str(dtype).removeprefix("torch."),
            **{name: statistics.median(t) * 1e3 for name, t in times.items()}}


def end_to_end(repeats: int) -> list[dict]:
    """Median train() tokens/s per precision and kernel, alternating runs."""
    rows, limits = [], (attention.FUSED_MAX_SEQ, attention.BLOCKED_MAX_SEQ)
    modes = {"fused": limits, "blocked": (0, limits[1]), "sdpa": (0, 0)}
    try:
        for precision in ("fp32", "bf16", "fp8"):
            recipe = Recipe(precision=precision, batch_schedule="constant", batch_end=16,
                            seq_len=128)
            tok_s = {mode: [] for mode in modes}
            for _ in range(repeats):
                for mode, (fused_max, blocked_max) in modes.items():
                    attention.FUSED_MAX_SEQ, attention.BLOCKED_MAX_SEQ = fused_max, blocked_max
                    res = train(preset("debug"), recipe, token_budget=16 * 128 * 8, seed=0,
                                eval_sequences=4)
                    assert res.environment["attention"].startswith(
                        {"fused": "fused", "blocked": "blocked", "sdpa": "torch SDPA"}[mode])
                    tok_s[mode].append(res.tokens_per_s)
            rows.append({"precision": precision,
                         **{m: statistics.median(v) for m, v in tok_s.items()}})
    finally:
        attention.FUSED_MAX_SEQ, attention.BLOCKED_MAX_SEQ = limits
    return rows


def _ms(row: dict, name: str) -> str:
    return f"{row[name]:.1f}" if name in row else "—"


def render(rows: list[dict], e2e: list[dict], threads: int, cmd: str) -> str:
    lines = [
        "## Attention core (CPU)", "",
        f"Measured {datetime.date.today()} on {platform.machine()}, {threads} torch threads, "
        f"torch {torch.__version__}, a shared 2-core machine. Command: `{cmd}`.", "",
        "One MLA layer's causal attention, forward + backward, proxy-s heads (18 heads, q/k "
        "head dim 24, v 16), 2048 tokens per call; medians of alternating runs. fused = "
        "`trainers.nn.fused_attention.FusedCausalAttention` (the C++ kernel built for this CPU); "
        "blocked = `trainers.nn.attention.BlockedCausalAttention` (PyTorch ops, the fallback "
        "without a compiler); both compute in fp32 whatever the input dtype. sdpa (flash) = v "
        "zero-padded so SDPA takes the CPU flash kernel; sdpa (math) = unpadded, SDPA's bmm + "
        f"softmax fallback (transformers' DeepseekV3). Past {LONG_ROWS} tokens only fused and "
        "flash run; at 4096 a call is one sequence (4096 tokens).", "",
        "| seq_len | dtype | fused (ms) | blocked (ms) | sdpa flash (ms) | sdpa math (ms) | "
        "flash / fused | math / fused |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        math = (f"{r['sdpa (math)'] / r['fused']:.2f}x" if "sdpa (math)" in r else "—")
        lines.append(f"| {r['seq_len']} | {r['dtype']} | {r['fused']:.1f} | "
                     f"{_ms(r, 'blocked')} | {r['sdpa (flash)']:.1f} | {_ms(r, 'sdpa (math)')} "
                     f"| {r['sdpa (flash)'] / r['fused']:.2f}x | {math} |")
    wins = {}
    for r in rows:
        if r["fused"] < r["sdpa (flash)"]:
            wins[r["dtype"]] = max(wins.get(r["dtype"], 0), r["seq_len"])
    lines += ["", f"The proxy takes the fused kernel up to `FUSED_MAX_SEQ` = "
              f"{attention.FUSED_MAX_SEQ} tokens; in this run the longest sequence at which "
              "it beat flash was "
              + (", ".join(f"{t} ({d})" for d, t in wins.items()) or "none") + ".", ""]
    lines += [
        "End to end: `trainers.train` on the `debug` proxy, batch 16×128, 16,384 tokens, "
        "median tok/s of alternating runs with each kernel (fp8 is emulated on CPU).", "",
        "| precision | fused (tok/s) | blocked (tok/s) | sdpa (tok/s) | fused / blocked | "
        "fused / sdpa |",
        "|---|---|---|---|---|---|",
        *[f"| {r['precision']} | {r['fused']:.0f} | {r['blocked']:.0f} | {r['sdpa']:.0f} | "
          f"{r['fused'] / r['blocked']:.2f}x | {r['fused'] / r['sdpa']:.2f}x |" for r in e2e],
        ""]
    return "\n".join(lines)


def write_section(text: str) -> None:
    path = ROOT / "benchmarks" / "RESULTS.md"
    old = path.read_text()
    title = "## Attention core (CPU)"
    if title in old:
        head, _, rest = old.partition(title)
        nxt = rest.find("\n## ")
        path.write_text(head + text + (rest[nxt:] if nxt >= 0 else ""))
    else:  # first time: right after the proxy-model section
        head, sep, rest = old.partition("## Proxy model (H200)")
        path.write_text(head + text + "\n" + sep + rest if sep else old + "\n" + text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--write", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    rows = [measure(t, dtype, a.repeats) for dtype in (torch.float32, torch.bfloat16)
            for t in (128, 256, 512, 1024, 2048, 4096)]
    text = render(rows, end_to_end(max(3, a.repeats // 5)), a.threads,
                  "python " + " ".join(sys.argv))
    print(text)
    if a.write:
        write_section(text)


if __name__ == "__main__":
    main()
