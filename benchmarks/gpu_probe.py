"""Where a proxy training step's time goes on a GPU, and which levers move it (torch only).

    python benchmarks/gpu_probe.py --out probe.json [--trace-dir DIR]   # ~3 minutes on an H200
    python benchmarks/gpu_probe.py --smoke --out /tmp/probe.json        # plumbing, on the CPU

Sections (each guarded; the JSON is rewritten after each, so a run cut short keeps its figures):

- ``profile``: torch.profiler over `proxy-l` optimizer steps (bf16, 32×1024 tokens): GPU kernel
  time per step by kind (GEMM, attention, routing and dispatch, reductions and norms, element-wise,
  copies, optimizer), the step's wall time (so the GPU's idle share), host synchronisations per
  step, the top kernels and the top CPU ops.
- ``levers``: the same steps with one lever after another switched on, each timed as the median
  of 10 steps: the saved-tensor meter off, rope cached, bincount without its host sync, per-step
  statistics kept on the device, blocks compiled with `torch.compile`.
- ``quantizer``: the fp8 block quantizer eager vs compiled at a proxy-l activation shape.
- ``fp8_api``: which scaled (grouped) GEMM entry points this torch has, and whether a block-scaled
  grouped GEMM runs (its error message otherwise).
- ``concurrency``: `proxy-s` trainings as 1, 2 and 4 processes on one GPU: trainings per hour.

Nothing here changes the trainer: the levers are patches applied inside this process only.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import inspect
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_sections import run_section  # noqa: E402  (benchmarks/ is sys.path[0])

from trainers import Recipe, preset  # noqa: E402
from trainers.loop import StepTimer  # noqa: E402

DEVICE = "cuda"
KINDS = [  # first match wins; kernel names of cuBLAS, CUTLASS, flash attention and ATen
    ("attention", r"flash|fmha|attention|sdpa"),
    ("gemm", r"gemm|cutlass|nvjet|xmma|cublas|wgmma|s16816|s1688|sm90_|grouped_mm"),
    ("optimizer", r"adam|multi_tensor|foreach"),
    ("routing", r"sort|topk|bincount|scatter|gather|index|cumsum|radix|histogram|masked|"
                r"nonzero|unique|arange"),
    ("reduce_norm", r"reduce|norm|softmax|cross_entropy|nll|log_softmax|mean|sum"),
    ("copy", r"copy|memcpy|memset|cat|pad|Memcpy|Memset|fill"),
    ("elementwise", r"elementwise|vectorized|unrolled|pointwise|triton_"),
]


def kind_of(name: str) -> str:
    for kind, pattern in KINDS:
        if re.search(pattern, name, re.IGNORECASE):
            return kind
    return "other"


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def timer_for(name: str, precision: str = "bf16", batch: int = 32) -> tuple[StepTimer, int]:
    seq = 1024 if DEVICE == "cuda" else 128
    recipe = Recipe(batch_schedule="constant", batch_end=batch, seq_len=seq,
                    precision=precision)  # type: ignore[arg-type]
    return StepTimer(preset(name), recipe, device=DEVICE), batch


def _device_us(e) -> float:
    for attr in ("self_device_time_total", "self_cuda_time_total", "device_time_total"):
        v = getattr(e, attr, None)
        if v:
            return float(v)
    return 0.0


def profile(name: str, steps: int, trace_dir: str | None) -> dict:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile
    timer, batch = timer_for(name)
    for _ in range(3):
        timer.step(batch)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEVICE == "cuda" else [])
    sync()
    t0 = time.perf_counter()
    with torch_profile(activities=acts) as prof:
        for _ in range(steps):
            timer._run.step(batch)
        sync()
    wall = (time.perf_counter() - t0) / steps
    kernel_us: dict[str, float] = {}
    by_kind: dict[str, float] = {}
    for e in prof.events():
        if str(getattr(e, "device_type", "")).endswith("CUDA"):
            us = float(getattr(e, "device_time", 0.0) or getattr(e, "cuda_time", 0.0) or 0.0)
            kernel_us[e.name] = kernel_us.get(e.name, 0.0) + us
    for k, us in kernel_us.items():
        by_kind[kind_of(k)] = by_kind.get(kind_of(k), 0.0) + us
    busy = sum(kernel_us.values()) / steps / 1e6
    cpu_ops = {e.key: (e.count, e.self_cpu_time_total) for e in prof.key_averages()}
    syncs = {k: v[0] / steps for k, v in cpu_ops.items()
             if re.search(r"Synchronize|_local_scalar_dense|aten::item|cudaMemcpy\b|"
                          r"cudaMemcpyAsync|cudaStreamSynchronize", k)}
    top_cpu = sorted(cpu_ops.items(), key=lambda kv: -kv[1][1])[:30]
    out = {"preset": name, "steps": steps, "tokens_per_step": batch * timer._run.recipe.seq_len,
           "wall_ms_per_step": wall * 1e3, "gpu_busy_ms_per_step": busy * 1e3,
           "gpu_idle_share": max(0.0, 1 - busy / wall) if busy else None,
           "kernel_ms_per_step_by_kind": {k: v / steps / 1e3 for k, v in
                                          sorted(by_kind.items(), key=lambda kv: -kv[1])},
           "top_kernels_ms_per_step": [(k[:160], v / steps / 1e3) for k, v in
                                       sorted(kernel_us.items(), key=lambda kv: -kv[1])[:40]],
           "sync_like_calls_per_step": syncs,
           "top_cpu_ops_self_ms_per_step": [(k, c / steps, us / steps / 1e3)
                                            for k, (c, us) in top_cpu],
           "kernels_per_step": sum(1 for e in prof.events()
                                   if str(getattr(e, "device_type", "")).endswith("CUDA"))
           / steps}
    if trace_dir:
        with torch_profile(activities=acts) as prof2:
            timer._run.step(batch)
            sync()
        path = Path(trace_dir) / f"trace_{name}.json"
        prof2.export_chrome_trace(str(path))
        subprocess.run(["gzip", "-f", str(path)], check=False)
    return out


def _step_ms(timer: StepTimer, batch: int, n: int = 10, warm: int = 3) -> float:
    for _ in range(warm):
        timer.step(batch)
    return statistics.median(timer.step(batch).wall_s for _ in range(n)) * 1e3


def levers(name: str) -> dict:
    """Cumulative in-process patches; each row the median step time with it and all above."""
    import trainers.loop as loop
    import trainers.nn.model as model_mod
    import trainers.nn.moe as moe
    out: dict = {}
    timer, batch = timer_for(name)
    run = timer._run
    out["baseline_ms"] = _step_ms(timer, batch)

    run.meter.measure = contextlib.nullcontext  # type: ignore[method-assign]
    out["meter_off_ms"] = _step_ms(timer, batch)

    cache: dict = {}
    real_rope = model_mod.rope_frequencies

    def cached_rope(args, t):
        if t not in cache:
            cache[t] = real_rope(args, t)
        return cache[t]
    model_mod.rope_frequencies = cached_rope
    out["rope_cached_ms"] = _step_ms(timer, batch)

    def bincount(x, minlength=0):
        n = max(minlength, 1)
        return torch.zeros(n, dtype=torch.long, device=x.device).scatter_add_(
            0, x, torch.ones_like(x))
    real_bincount = torch.bincount
    moe.torch.bincount = bincount  # the moe module's torch is the torch module: patch narrowly
    try:
        out["bincount_no_sync_ms"] = _step_ms(timer, batch)
    finally:
        moe.torch.bincount = real_bincount
    out["note"] = ("bincount patch undone after its row (it is global to torch); rows below "
                   "keep the meter off and rope cached")

    real_max_vio = loop.max_vio
    loop.max_vio = lambda x: 0.0  # type: ignore[assignment]
    out["no_per_layer_vio_sync_ms"] = _step_ms(timer, batch)
    loop.max_vio = real_max_vio

    t0 = time.perf_counter()
    try:
        for block in run.model.layers:
            block.compile()
        timer.step(batch)
        out["compile_first_step_s"] = time.perf_counter() - t0
        out["blocks_compiled_ms"] = _step_ms(timer, batch)
    except Exception as e:  # noqa: BLE001 - record why compile failed and go on
        out["compile_error"] = f"{type(e).__name__}: {str(e)[:600]}"
    return out


def quantizer() -> dict:
    from trainers.nn.fp8 import _quantize
    m, k = (32768, 1024) if DEVICE == "cuda" else (512, 256)
    x = torch.randn(m, k, device=DEVICE, dtype=torch.bfloat16)
    out: dict = {"shape": [m, k]}
    compiled = torch.compile(_quantize)
    for label, rows in (("1x128", 1), ("128x128", 128)):
        for impl, fn in (("eager", _quantize), ("compiled", compiled)):
            try:
                out[f"{label}_{impl}_ms"] = _time(lambda fn=fn, rows=rows: fn(x, rows)) * 1e3
            except Exception as e:  # noqa: BLE001
                out[f"{label}_{impl}_error"] = f"{type(e).__name__}: {str(e)[:400]}"
        # transposed operand (wgrad's dyᵀ): the quantizer sees a non-contiguous view
        try:
            out[f"{label}_T_compiled_ms"] = _time(lambda rows=rows: compiled(x.t(), rows)) * 1e3
            out[f"{label}_T_eager_ms"] = _time(lambda rows=rows: _quantize(x.t(), rows)) * 1e3
        except Exception as e:  # noqa: BLE001
            out[f"{label}_T_error"] = f"{type(e).__name__}: {str(e)[:400]}"
    return out


def _time(fn, repeats: int = 20, warm: int = 3) -> float:
    for _ in range(warm):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync()
    return (time.perf_counter() - t0) / repeats


def fp8_api() -> dict:
    import torch.nn.functional as F
    out: dict = {"torch": torch.__version__}
    try:
        import triton
        out["triton"] = triton.__version__
    except ImportError:
        out["triton"] = None
    for name, obj in (("torch._scaled_mm", getattr(torch, "_scaled_mm", None)),
                      ("torch._scaled_grouped_mm", getattr(torch, "_scaled_grouped_mm", None)),
                      ("F.scaled_mm", getattr(F, "scaled_mm", None)),
                      ("F.scaled_grouped_mm", getattr(F, "scaled_grouped_mm", None)),
                      ("torch._grouped_mm", getattr(torch, "_grouped_mm", None))):
        if obj is None:
            out[name] = None
            continue
        try:
            out[name] = str(inspect.signature(obj))
        except (TypeError, ValueError):
            out[name] = (obj.__doc__ or "present, no signature")[:1500]
        if name.startswith("F.") and obj.__doc__:
            out[name + ".doc"] = obj.__doc__[:3000]
    for enum in ("ScalingType", "SwizzleType"):
        e = getattr(F, enum, None)
        out[f"F.{enum}"] = ([n for n in dir(e) if not n.startswith("_")]
                            if e is not None else None)
    if DEVICE == "cuda":
        out["grouped_tries"] = _grouped_fp8_tries()
    return out


def _grouped_fp8_tries() -> dict:
    """Run the candidate block-scaled grouped GEMMs once each; record result or error."""
    import torch.nn.functional as F
    tries: dict = {}
    g, m, k, n = 4, 512, 1024, 640
    a = torch.randn(g * m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(g, n, k, device="cuda").to(torch.float8_e4m3fn)
    offs = torch.arange(m, g * m + 1, m, device="cuda", dtype=torch.int32)
    ref = torch._grouped_mm(a.bfloat16(), b.bfloat16().transpose(-2, -1), offs=offs)

    def check(name, fn):
        try:
            y = fn()
            tries[name] = {"ok": True, "rel_err": float((y.float() - ref.float()).norm()
                                                        / ref.float().norm())}
        except Exception as e:  # noqa: BLE001
            tries[name] = {"ok": False, "error": f"{type(e).__name__}: {str(e)[:500]}"}

    ones_row_a = torch.ones(g * m, device="cuda")
    ones_row_b = torch.ones(g, n, device="cuda")
    if hasattr(torch, "_scaled_grouped_mm"):
        check("torch._scaled_grouped_mm rowwise", lambda: torch._scaled_grouped_mm(
            a, b.transpose(-2, -1), ones_row_a, ones_row_b, offs=offs,
            out_dtype=torch.bfloat16))
    sg = getattr(F, "scaled_grouped_mm", None)
    st = getattr(F, "ScalingType", None)
    if sg is not None and st is not None:
        blk_a = torch.ones(k // 128, g * m, device="cuda").t()  # (M, K/128), outer-dim-major
        blk_b = torch.ones(g, n // 128, k // 128, device="cuda")
        for label, sa, ta, sb, tb in (
                ("F.scaled_grouped_mm 1x128 x 128x128", blk_a, "BlockWise1x128", blk_b,
                 "BlockWise128x128"),
                ("F.scaled_grouped_mm rowwise", ones_row_a, "RowWise", ones_row_b, "RowWise")):
            if hasattr(st, ta) and hasattr(st, tb):
                check(label, lambda sa=sa, sb=sb, ta=ta, tb=tb: sg(
                    a, b.transpose(-2, -1), sa, getattr(st, ta), sb, getattr(st, tb),
                    offs=offs, output_dtype=torch.bfloat16))
    return tries


CHILD = """
import json, sys, time
sys.path.insert(0, {root!r})
from trainers import Recipe, preset, train
r = Recipe(batch_schedule="constant", batch_end={batch}, seq_len={seq})
t0 = time.perf_counter()
res = train(preset({name!r}), r, token_budget={tokens}, device={device!r})
print(json.dumps({{"tok_s": res.tokens_per_s, "wall_s": time.perf_counter() - t0,
                  "val_loss": res.val_loss}}))
"""


def concurrency(name: str, tokens: int, counts: list[int]) -> dict:
    root = str(Path(__file__).resolve().parents[1])
    seq = 1024 if DEVICE == "cuda" else 128
    code = CHILD.format(root=root, batch=32, seq=seq, name=name, tokens=tokens, device=DEVICE)
    out: dict = {"preset": name, "tokens_per_training": tokens, "batch": 32, "seq_len": seq}
    for n in counts:
        t0 = time.perf_counter()
        procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(n)]
        results = []
        for p in procs:
            so, se = p.communicate()
            if p.returncode != 0:
                raise RuntimeError(f"child failed: {se[-800:]}")
            results.append(json.loads(so.strip().splitlines()[-1]))
        wall = time.perf_counter() - t0
        out[str(n)] = {"wall_s": wall, "trainings_per_hour": n * 3600 / wall,
                       "per_process_tok_s": [r["tok_s"] for r in results],
                       "aggregate_tok_s": n * tokens / wall}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="probe.json")
    p.add_argument("--trace-dir")
    p.add_argument("--only", help="comma-separated sections")
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--concurrency-tokens", type=int, default=2_097_152)
    a = p.parse_args()
    global DEVICE
    if a.smoke:
        DEVICE = "cpu"
    elif not torch.cuda.is_available():
        raise SystemExit("gpu_probe.py needs a CUDA device (or --smoke)")
    model = "debug" if a.smoke else "proxy-l"
    res: dict = {"date": str(datetime.date.today()), "torch": torch.__version__,
                 "gpu": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu (smoke)",
                 "command": " ".join(sys.argv), "errors": {}, "section_s": {}}
    only = set(a.only.split(",")) if a.only else None
    sections = [
        ("profile", lambda: profile(model, 3 if a.smoke else 5, a.trace_dir)),
        ("levers", lambda: levers(model)),
        ("quantizer", quantizer),
        ("fp8_api", fp8_api),
        ("concurrency", lambda: concurrency("debug" if a.smoke else "proxy-s",
                                            8192 if a.smoke else a.concurrency_tokens,
                                            [1, 2] if a.smoke else [1, 2, 4])),
    ]
    for name, fn in sections:
        if not only or name in only:
            run_section(res, a.out, name, fn)

if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
