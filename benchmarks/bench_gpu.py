"""The proxy's GPU checks, as one script for a session that has a lent GPU (needs torch only).

    python benchmarks/bench_gpu.py --out gpu_results.json      # ~5 minutes on an H200

1. bf16 and fp8 training tokens/s and MFU of `proxy-l` (MFU against the chip's dense bf16 peak,
   measured here as the rate of an 8192³ bf16 matmul; fp8 says whether it was emulated).
2. Routed experts: `torch._grouped_mm` vs the per-expert loop, forward + backward, same weights.
3. fp8 vs bf16 validation loss after the same tokens (DeepSeek-V3's bar: < 0.25% relative).

Prints a markdown section for benchmarks/RESULTS.md and writes the raw figures as JSON.
It imports only torch, `trainers` and `tuner.cost_model` (neither pulls in Ray or Optuna,
which the device machine lacks).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainers import Recipe, preset, train  # noqa: E402
from trainers.moe import RoutedExperts  # noqa: E402
from tuner.cost_model import flops_per_token  # noqa: E402  (torch-only: no Ray, no Optuna)


def matmul_peak(n: int = 8192, repeats: int = 20) -> float:
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    a @ b
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(repeats):
        a @ b
    torch.cuda.synchronize()
    return 2 * n ** 3 * repeats / (time.perf_counter() - t0)


def throughput(name: str, precision: str, tokens: int, peak: float) -> dict:
    args = preset(name)
    recipe = Recipe(batch_schedule="constant", batch_end=32, seq_len=1024, precision=precision)
    res = train(args, recipe, token_budget=tokens, eval_every_tokens=tokens, device="cuda")
    flops = flops_per_token(args, recipe.seq_len).model
    return {"preset": name, "precision": precision, "tok_s": res.tokens_per_s,
            "mfu": res.tokens_per_s * flops / peak, "val_loss": res.val_loss,
            "fp8_emulated": res.fp8_emulated, "peak_gib": res.peak_memory_bytes / 2 ** 30}


def experts(n_tokens: int = 8192, repeats: int = 20) -> dict:
    args = preset("proxy-l")
    ex = RoutedExperts(args).cuda()
    for p in ex.parameters():
        torch.nn.init.normal_(p, std=0.02)
    counts = torch.full((args.n_routed_experts,), n_tokens // args.n_routed_experts,
                        device="cuda")
    x = torch.randn(int(counts.sum()), args.dim, device="cuda", requires_grad=True)
    out = {}
    for grouped in (True, False):
        ex.use_grouped_mm = grouped
        with torch.autocast("cuda", dtype=torch.bfloat16):
            ex(x, counts).float().square().mean().backward()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(repeats):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                ex(x, counts).float().square().mean().backward()
        torch.cuda.synchronize()
        out["grouped_ms" if grouped else "looped_ms"] = (time.perf_counter() - t0) / repeats * 1e3
    out["speedup"] = out["looped_ms"] / out["grouped_ms"]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=2_000_000)
    p.add_argument("--out", default="gpu_results.json")
    a = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_gpu.py needs a CUDA device")
    peak = matmul_peak()
    runs = [throughput("proxy-l", prec, a.tokens, peak) for prec in ("bf16", "fp8")]
    gap = (runs[1]["val_loss"] - runs[0]["val_loss"]) / runs[0]["val_loss"]
    ex = experts()
    res = {"date": str(datetime.date.today()), "gpu": torch.cuda.get_device_name(),
           "torch": torch.__version__, "bf16_matmul_tflops": peak / 1e12, "runs": runs,
           "fp8_vs_bf16_relative_gap": gap, "experts": ex}
    Path(a.out).write_text(json.dumps(res, indent=2))
    print(f"## Proxy model ({res['gpu']})\n\nMeasured {res['date']}, torch {res['torch']}; "
          f"bf16 8192³ matmul {peak / 1e12:.0f} TFLOP/s (the MFU reference).\n"
          f"Command: `python benchmarks/bench_gpu.py --tokens {a.tokens}`.\n\n"
          "| preset | precision | tok/s | MFU | val_loss | peak GiB |\n|---|---|---|---|---|---|")
    for r in runs:
        label = r["precision"] + (" (emulated)" if r["fp8_emulated"] else "")
        print(f"| {r['preset']} | {label} | {r['tok_s']:.0f} | {r['mfu']:.1%} | "
              f"{r['val_loss']:.4f} | {r['peak_gib']:.1f} |")
    print(f"\nfp8 vs bf16 val_loss after {a.tokens:,} tokens: {gap:+.3%} relative "
          f"(DeepSeek-V3's bar: < 0.25%).\n\nRouted experts (proxy-l shapes, 8192 tokens, bf16, "
          f"fwd+bwd): grouped_mm {ex['grouped_ms']:.2f} ms vs loop {ex['looped_ms']:.2f} ms "
          f"= {ex['speedup']:.1f}x.")


if __name__ == "__main__":
    main()
