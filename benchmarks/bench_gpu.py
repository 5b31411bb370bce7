"""The proxy's GPU checks, as one script for a session that has a lent GPU (needs torch only).

    python benchmarks/bench_gpu.py --out gpu_results.json      # ~3 minutes on an H200

0. fp8 back end: which one `train()` picks here, and why (the start-up probe's note).
1. One fp8 Linear, forward + backward (three GEMMs), native `torch._scaled_mm` vs the emulation
   vs plain bf16, at a proxy-l shape and at DeepSeek-V3's dense-MLP shape; quantization included.
2. bf16 and fp8 training tokens/s and MFU of `proxy-l` (MFU against the chip's dense bf16 peak,
   measured here as the rate of an 8192³ bf16 matmul; fp8 says whether it was emulated).
3. Routed experts: `torch._grouped_mm` vs the per-expert loop, forward + backward, same weights.
4. fp8 vs bf16 validation loss after the same tokens, same seed and data (DeepSeek-V3's bar:
   < 0.25% relative).

Each section is guarded: a failure is recorded and the next section still runs. The JSON is
rewritten after every section, so a run cut short keeps what it measured. It imports only torch,
`trainers` and `tuner.modeling.cost_model` (neither pulls in Ray or Optuna, which the device
lacks).
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

from gpu_sections import run_section  # noqa: E402  (benchmarks/ is sys.path[0])

from trainers import Recipe, preset, train  # noqa: E402
from trainers.nn.fp8 import fp8_backend, fp8_linear  # noqa: E402
from trainers.nn.moe import RoutedExperts  # noqa: E402
from tuner.modeling.cost_model import flops_per_token  # noqa: E402  (torch-only: no Ray, no Optuna)

DEVICE = "cuda"


def cuda_time(fn, repeats: int, warmup: int = 3) -> float:
    """Seconds per call of `fn`, by CUDA events around `repeats` calls after `warmup`."""
    for _ in range(warmup):
        fn()
    if DEVICE == "cpu":  # --smoke: checks the script's plumbing, not a measurement
        t0 = time.perf_counter()
        for _ in range(repeats):
            fn()
        return (time.perf_counter() - t0) / repeats
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / repeats


def matmul_peak(n: int = 8192) -> float:
    a = torch.randn(n, n, device=DEVICE, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=DEVICE, dtype=torch.bfloat16)
    return 2 * n ** 3 / cuda_time(lambda: a @ b, repeats=20)


def linear_gemms(m: int, k: int, n: int) -> dict:
    """fwd + bwd of one Linear (3 GEMMs, 6mkn FLOPs) per back end; TFLOP/s counts those FLOPs."""
    x = torch.randn(m, k, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    w = (torch.randn(n, k, device=DEVICE) * 0.02).requires_grad_()
    g = torch.randn(m, n, device=DEVICE, dtype=torch.bfloat16)

    def bf16():
        y = torch.nn.functional.linear(x, w.to(torch.bfloat16))
        torch.autograd.grad(y, (x, w), g)

    def fp8(backend):
        def run():
            y = fp8_linear(x, w, backend)
            torch.autograd.grad(y, (x, w), g)
        return run

    out = {"shape": [m, k, n]}
    for name, fn in (("bf16", bf16), ("fp8_native", fp8("native")),
                     ("fp8_emulated", fp8("emulated"))):
        try:
            sec = cuda_time(fn, repeats=10)
            out[name] = {"ms": sec * 1e3, "tflops": 6 * m * k * n / sec / 1e12}
        except Exception as e:  # native may be unavailable; record why
            out[name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
    return out


def throughput(name: str, precision: str, tokens: int, peak: float, seed: int = 0) -> dict:
    args = preset(name)
    seq_len = 1024 if DEVICE == "cuda" else 128
    recipe = Recipe(batch_schedule="constant", batch_end=32, seq_len=seq_len, precision=precision)
    res = train(args, recipe, token_budget=tokens, eval_every_tokens=tokens, device=DEVICE,
                seed=seed)
    flops = flops_per_token(args, recipe.seq_len).model
    return {"preset": name, "precision": precision, "tokens": tokens, "tok_s": res.tokens_per_s,
            "mfu": res.tokens_per_s * flops / peak, "val_loss": res.val_loss,
            "fp8_emulated": res.fp8_emulated, "fp8_backend": res.environment.get("fp8_backend"),
            "peak_gib": res.peak_memory_bytes / 2 ** 30, "steps": res.steps,
            "diverged": res.diverged, "seed": seed}


def experts(name: str, n_tokens: int, repeats: int = 20) -> dict:
    args = preset(name)
    ex = RoutedExperts(args).to(DEVICE)
    for p in ex.parameters():
        torch.nn.init.normal_(p, std=0.02)
    counts = torch.full((args.n_routed_experts,), n_tokens // args.n_routed_experts,
                        device=DEVICE)
    x = torch.randn(int(counts.sum()), args.dim, device=DEVICE, requires_grad=True)
    out = {"tokens": n_tokens, "experts": args.n_routed_experts}
    for grouped in (True, False):
        ex.use_grouped_mm = grouped

        def step():
            with torch.autocast(DEVICE, dtype=torch.bfloat16):
                ex(x, counts).float().square().mean().backward()
        out["grouped_ms" if grouped else "looped_ms"] = cuda_time(step, repeats) * 1e3
    out["speedup"] = out["looped_ms"] / out["grouped_ms"]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=1_572_864, help="per training run")
    p.add_argument("--out", default="gpu_results.json")
    p.add_argument("--smoke", action="store_true",
                   help="tiny shapes on the CPU: checks the script runs, measures nothing")
    a = p.parse_args()
    global DEVICE
    if a.smoke:
        DEVICE = "cpu"
    elif not torch.cuda.is_available():
        raise SystemExit("bench_gpu.py needs a CUDA device (or --smoke)")
    model = "debug" if a.smoke else "proxy-l"
    shapes = [(256, 128, 384), (128, 256, 128)] if a.smoke else \
        [(32768, 1024, 2632), (16384, 7168, 18432)]
    res: dict = {"date": str(datetime.date.today()),
                 "gpu": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu (smoke)",
                 "torch": torch.__version__, "command": " ".join(sys.argv), "errors": {}}

    def section(name, fn):
        run_section(res, a.out, name, fn)

    section("fp8_backend", lambda: fp8_backend(DEVICE))
    section("bf16_matmul_flops", lambda: matmul_peak(512 if a.smoke else 8192))
    peak = res.get("bf16_matmul_flops") or 989e12
    section("linear_proxy_l", lambda: linear_gemms(*shapes[0]))
    section("linear_v3_mlp", lambda: linear_gemms(*shapes[1]))
    section("experts", lambda: experts(model, 512 if a.smoke else 8192))
    tokens = 4096 if a.smoke else a.tokens
    section("train_bf16", lambda: throughput(model, "bf16", tokens, peak))
    section("train_fp8", lambda: throughput(model, "fp8", tokens, peak))
    # the noise floor of the gap: bf16 against bf16 with another seed (init and data order)
    section("train_bf16_seed1", lambda: throughput(model, "bf16", tokens, peak, seed=1))
    if "train_bf16" in res and "train_fp8" in res:
        b, f = res["train_bf16"]["val_loss"], res["train_fp8"]["val_loss"]
        res["fp8_vs_bf16_relative_gap"] = (f - b) / b
        if "train_bf16_seed1" in res:
            res["bf16_seed_relative_gap"] = (res["train_bf16_seed1"]["val_loss"] - b) / b
        Path(a.out).write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
