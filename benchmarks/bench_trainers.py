"""Proxy-model benchmarks on CPU, each measured side by side with its reference in one process.

1. throughput: training tokens/s of our model vs transformers' DeepseekV3ForCausalLM on the same
   config (MTP off: HF does not train it), same batch, same optimizer, fp32, alternating steps;
   repeated in --runs separate runs, since this shared machine's speed drifts between them.
2. mfu: model FLOP utilization of a training step, against the fp32 matmul rate measured right
   before at the same thread count. Model FLOPs = tuner.modeling.cost_model.flops_per_token
   (6·N_active matmul weights + attention), recompute not counted as useful work.
3. memory: saved-activation bytes per step at checkpoint ratios 0, 0.25, 0.5, 1.0 (measured
   exactly with saved-tensor hooks).

    python benchmarks/bench_trainers.py [--threads 2] [--repeats 8] [--runs 5] [--write]

--write replaces the "## Proxy model (CPU)" section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trainers import Recipe, Transformer, preset, train  # noqa: E402
from trainers.data import TrainStream, stdlib_corpus  # noqa: E402
from tuner.modeling.cost_model import flops_per_token  # noqa: E402

SEQ, BATCH = 128, 16


def _ours_step(model, opt, batch):
    out = model(batch[:, :-1])
    loss = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1), batch[:, 1:].flatten())
    (loss + 1e-4 * out.balance_loss).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def _hf_step(model, opt, batch):
    out = model(input_ids=batch[:, :-1], labels=batch[:, :-1].contiguous())
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def _hf_model(args):
    sys.path.insert(0, str(ROOT / "tests" / "trainers"))
    import transformers
    from test_hf_parity import copy_weights_to_hf, hf_config

    ours = Transformer(args)
    # HF's own default attention (SDPA) rather than the eager path the parity test uses
    hf = transformers.DeepseekV3ForCausalLM(hf_config(args, attn_implementation="sdpa"))
    copy_weights_to_hf(ours, hf)
    return ours.train(), hf.train()


def throughput(name: str, repeats: int, seq: int = SEQ, batch: int = BATCH) -> dict:
    args = dataclasses.replace(preset(name), mtp_depth=0)
    ours, hf = _hf_model(args)
    stream = TrainStream(stdlib_corpus(), seq, seed=0)
    batches = [stream.next_batch(batch) for _ in range(repeats)]
    runs = {"ours": (ours, _ours_step), "hf": (hf, _hf_step)}
    # both get the optimizer trainers.train uses (fused AdamW)
    opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-3, fused=True)
            for k, (m, _) in runs.items()}
    times = {k: [] for k in runs}
    for k, (m, step) in runs.items():  # warm-up
        step(m, opts[k], batches[0])
    for b in batches:  # alternate so machine noise hits both alike
        for k, (m, step) in runs.items():
            t0 = time.perf_counter()
            step(m, opts[k], b)
            times[k].append(time.perf_counter() - t0)
    tok = batch * seq
    ours_tps = tok / statistics.median(times["ours"])
    hf_tps = tok / statistics.median(times["hf"])
    return {"preset": name, "seq": seq, "batch": batch, "ours_tok_s": ours_tps,
            "hf_tok_s": hf_tps, "speedup": ours_tps / hf_tps}


def matmul_rate(n: int = 1024, repeats: int = 10) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    t0 = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * n ** 3 * repeats / (time.perf_counter() - t0)


def mfu(name: str, budget: int) -> dict:
    args = preset(name)
    peak = matmul_rate()
    recipe = Recipe(batch_schedule="constant", batch_end=BATCH, seq_len=SEQ, precision="fp32")
    res = train(args, recipe, token_budget=budget, eval_every_tokens=budget, eval_sequences=16)
    model_flops = flops_per_token(args, SEQ).model
    achieved = res.tokens_per_s * model_flops
    return {"preset": name, "tok_s": res.tokens_per_s, "flops_per_token": model_flops,
            "achieved_gflops": achieved / 1e9, "matmul_gflops": peak / 1e9,
            "mfu": achieved / peak}


def memory(name: str) -> list[dict]:
    args = preset(name)
    rows = []
    for ratio in (0.0, 0.25, 0.5, 1.0):
        recipe = Recipe(batch_schedule="constant", batch_end=BATCH, seq_len=SEQ,
                        precision="fp32", checkpoint_ratio=ratio)
        res = train(args, recipe, token_budget=2 * BATCH * SEQ, eval_sequences=16)
        rows.append({"ratio": ratio, "activation_mb": res.activation_bytes / 2 ** 20,
                     "peak_mb": res.peak_memory_bytes / 2 ** 20})
    base = rows[0]["activation_mb"]
    for r in rows:
        r["vs_none"] = r["activation_mb"] / base
    return rows


def render(tp: list[list[dict]], mf: list[dict], mem: list[dict], threads: int, cmd: str) -> str:
    lines = [
        "## Proxy model (CPU)", "",
        f"Measured {datetime.date.today()} on {platform.machine()}, {threads} torch threads, "
        f"torch {torch.__version__}, a shared 2-core machine (figures are medians of "
        "alternating runs; ratios are the robust part).",
        f"Command: `{cmd}`.", "",
        "### Training throughput vs transformers' DeepseekV3ForCausalLM (fp32, 2048 tokens per "
        "step, MTP off, fused AdamW step included in both, HF with its SDPA attention and "
        "grouped_mm experts; target >= 1.5x)", "",
        f"Each configuration measured in {len(tp)} separate runs (fresh models each run); "
        "tok/s are the median run's (the lower middle for an even count).", "",
        "| preset | batch × seq_len | ours (tok/s) | HF (tok/s) | speedup, median run | "
        "speedup, all runs | runs >= 1.5x |",
        "|---|---|---|---|---|---|---|",
        *[_throughput_row([run[i] for run in tp]) for i in range(len(tp[0]))], "",
        "Reading: outside the attention core the two models run the same GEMMs at the same "
        "speed (transformers 5 runs the experts with grouped_mm too), so the speedup is the "
        "attention core's plus transformers' extra copies and masking. Ours runs the fused C++ "
        "kernel of `trainers/csrc/causal_attention.cpp` (built for this CPU at first use; see "
        "\"Attention core (CPU)\" below for it against the blocked PyTorch fallback and SDPA's "
        "flash and math kernels); transformers' narrower v sends SDPA to the math kernel (bmm "
        "+ softmax, probabilities kept). At 128 tokens the GEMMs are now about half of our step "
        "(at 180-200 GFLOP/s, this machine's fp32 matmul rate, except wkv_b's forward with its "
        "inner dim of 64 at ~120) and the attention core about a fifth (~5 ms per layer, fwd + "
        "bwd, against ~15 for the blocked kernel); the lead grows with sequence length. The "
        "kernel runs on torch's own OpenMP threads: with a thread of its own it had to compete "
        "with torch's workers, which spin after each op, and the step was ~20% slower. Kept "
        "from earlier rounds: MoE dispatch by index_select (its backward, index_add_, is ~8x "
        "the accumulating index_put_ of x[idx]), RoPE as complex multiplies (3x the strided "
        "real rotation). Tried without gain: torch.compile of the whole model (56 s compile, "
        "no faster), F.rms_norm, and, before the tiled kernel, a row-at-a-time C kernel (every "
        "loop vectorized by GCC but not register-blocked: 35.7 ms per layer, load/store "
        "bound).", "",
        "### Model FLOP utilization (fp32; reference: measured 1024³ fp32 matmul rate at the "
        "same thread count; target >= 25% for proxy-s)", "",
        "| preset | tok/s | model FLOPs/token | achieved GFLOP/s | matmul GFLOP/s | MFU |",
        "|---|---|---|---|---|---|",
        *[f"| {r['preset']} | {r['tok_s']:.0f} | {r['flops_per_token'] / 1e6:.2f} M | "
          f"{r['achieved_gflops']:.1f} | {r['matmul_gflops']:.1f} | {r['mfu']:.1%} |"
          for r in mf], "",
        f"### Saved activations vs checkpoint ratio (proxy-s, fp32, batch {BATCH}×{SEQ}; "
        "measured with saved-tensor hooks)", "",
        "| checkpoint_ratio | activations (MiB) | vs ratio 0 | peak, CPU accounting (MiB) |",
        "|---|---|---|---|",
        *[f"| {r['ratio']} | {r['activation_mb']:.1f} | {r['vs_none']:.2f} | "
          f"{r['peak_mb']:.1f} |" for r in mem], "",
    ]
    return "\n".join(lines)


def _throughput_row(runs: list[dict]) -> str:
    runs = sorted(runs, key=lambda r: r["speedup"])
    mid = runs[(len(runs) - 1) // 2]  # the lower middle when the count is even
    met = sum(r["speedup"] >= 1.5 for r in runs)
    speedups = ", ".join(f"{r['speedup']:.2f}" for r in runs)
    return (f"| {mid['preset']} | {mid['batch']}×{mid['seq']} | {mid['ours_tok_s']:.0f} | "
            f"{mid['hf_tok_s']:.0f} | {mid['speedup']:.2f}x | {speedups} | "
            f"{met} of {len(runs)} |")


def write_section(text: str) -> None:
    path = ROOT / "benchmarks" / "RESULTS.md"
    old = path.read_text() if path.exists() else "# Benchmark results\n"
    head, sep, rest = old.partition("## Proxy model (CPU)")
    tail = ""
    if sep:
        nxt = rest.find("\n## ")
        tail = rest[nxt + 1:] if nxt >= 0 else ""
    path.write_text(head.rstrip() + "\n\n" + text + ("\n" + tail if tail else ""))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=8)
    p.add_argument("--runs", type=int, default=5, help="separate throughput runs per config")
    p.add_argument("--write", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    # the recipes' default 128-token sequences, and 512 (attention's share grows with length)
    tp = [[throughput("debug", a.repeats), throughput("proxy-s", a.repeats),
           throughput("proxy-s", a.repeats, seq=512, batch=BATCH * SEQ // 512)]
          for _ in range(a.runs)]
    mf = [mfu(n, budget) for n, budget in (("debug", 65536), ("proxy-s", 65536))]
    mem = memory("proxy-s")
    text = render(tp, mf, mem, a.threads, "python " + " ".join(sys.argv))
    print(text)
    if a.write:
        write_section(text)


if __name__ == "__main__":
    main()
