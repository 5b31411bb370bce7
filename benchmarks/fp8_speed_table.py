"""The full run's modeled fp8 speed per GEMM, as a Markdown table (no GPU; everything modeled).

    python benchmarks/fp8_speed_table.py                       # DeepSeek-V3 671B, H800, EP 64
    python benchmarks/fp8_speed_table.py --target deepseek-v3-16b --ep 8 --hardware h100

Per block Linear of the target: its GEMM shape on one GPU (m tokens, weight n x k), the kernel
speed-up over bf16 of each pass (forward, dgrad, wgrad) from `tuner.modeling.fp8_speed`, the
speed-up priced (a pass where fp8 loses runs bf16), and whether torchao's H100 auto-filter would
convert the layer; then the block matmuls' speed-up and the run's GPU-hours per precision.
"""

from __future__ import annotations

import argparse

from tuner.modeling import cost_model as cm
from tuner.modeling import fp8_speed as fs
from tuner.modeling.full_run import DEFAULT_MFU, load_target
from tuner.modeling.hardware import get_hardware


def table(target: str, hardware: str, ep: int, tp: int, tokens: int, run_tokens: float) -> str:
    args, name = load_target(target)
    hw = get_hardware(hardware)
    speed = fs.fp8_speed(args, hw, tokens=tokens, ep=ep, tp=tp)
    lines = [f"{name} on {hw.name}, {tokens} tokens per micro-batch, ep {ep}, tp {tp} (modeled; "
             f"{fs.BLOCKWISE_H100.source}):", "",
             "| GEMM | m | n | k | fwd | dgrad | wgrad | priced (3 passes) | torchao filter |",
             "|---|---|---|---|---|---|---|---|---|"]
    for g in speed.gemms:
        k = g.kernel
        lines.append(f"| {g.gemm.name} | {g.gemm.m} | {g.gemm.n} | {g.gemm.k} | {k['fwd']:.2f} "
                     f"| {k['dgrad']:.2f} | {k['wgrad']:.2f} | {g.train:.2f} | "
                     f"{'skips' if fs.auto_filter_skips(g.gemm.n, g.gemm.k) else 'converts'} |")
    hours = {p: cm.gpu_hours(args, tokens=run_tokens, seq_len=4096, hw=hw, precision=p,
                             mfu=DEFAULT_MFU, ep=ep, tp=tp) for p in ("fp32", "bf16", "fp8")}
    lines += ["", f"Block matmuls: {speed.train:.3f}x bf16 in training, {speed.forward:.3f}x in "
              f"forward (recompute). GPU-hours for {run_tokens:.3g} tokens at MFU {DEFAULT_MFU}: "
              + ", ".join(f"{p} {h / 1e6:.3g}M" for p, h in hours.items())
              + f"; fp8 saves {1 - hours['fp8'] / hours['bf16']:.1%} of bf16's."]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="deepseek-v3-671b")
    p.add_argument("--hardware", default="h800")
    p.add_argument("--ep", type=int, default=cm.DEEPSEEK_V3_EP)
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--tokens", type=int, default=4096, help="tokens per micro-batch")
    p.add_argument("--run-tokens", type=float, default=cm.DEEPSEEK_V3_TOKENS)
    a = p.parse_args()
    print(table(a.target, a.hardware, a.ep, a.tp, a.tokens, a.run_tokens))


if __name__ == "__main__":
    main()
