"""The GPU training path against the reference code, side by side in one script (torch only).

    git archive REF trainers | tar -x -C .ref    # the reference trainer (REF: a commit)
    python benchmarks/bench_gpu_speed.py --ref .ref --out speed.json     # ~10 minutes on an H200
    python benchmarks/bench_gpu_speed.py --ref .ref --smoke --out /tmp/s.json   # CPU plumbing

Each configuration trains in its own process (a fresh CUDA context, its own compile caches):
the reference trainer (``--ref``), this tree with ``MOETUNE_FUSION=compile`` (the default),
``eager`` (same code, nothing compiled) and ``blocks`` (every block compiled whole). Every process
first trains a few steps untimed (CUDA, cuBLAS and compile warm-up; the compile time is
reported), then `proxy-l` bf16 for the same tokens with seeds 0 and 1: tok/s, MFU, peak memory,
val_loss. Then the new code's profile, one fp8 Linear (forward + backward) vs bf16, fp8 training,
and `proxy-m` trainings as 1, 2 and 4 concurrent processes. Sections are guarded and the JSON is
rewritten after each.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_sections import run_section  # noqa: E402

CHILD = r"""
import json, sys, time
sys.path.insert(0, {path!r})
import torch
from trainers import Recipe, preset, train
dev = {device!r}
seq = 1024 if dev == "cuda" else 128
def run(name, precision, tokens, seed):
    r = Recipe(batch_schedule="constant", batch_end=32, seq_len=seq, precision=precision)
    t0 = time.perf_counter()
    res = train(preset(name), r, token_budget=tokens, eval_every_tokens=tokens, device=dev,
                seed=seed)
    return {{"preset": name, "precision": precision, "seed": seed, "tokens": tokens,
             "tok_s": res.tokens_per_s, "val_loss": res.val_loss, "steps": res.steps,
             "peak_gib": res.peak_memory_bytes / 2**30, "wall_s": time.perf_counter() - t0,
             "fp8_emulated": res.fp8_emulated, "env": res.environment}}
out = {{"warmup": run({name!r}, {precision!r}, {warm_tokens}, 0)}}
for seed in {seeds}:
    out[f"seed{{seed}}"] = run({name!r}, {precision!r}, {tokens}, seed)
print("RESULT " + json.dumps(out))
"""


def child(path: str, fusion: str, name: str, precision: str, tokens: int, warm_tokens: int,
          seeds: list[int], device: str, timeout: float) -> dict:
    code = CHILD.format(path=path, device=device, name=name, precision=precision,
                        tokens=tokens, warm_tokens=warm_tokens, seeds=seeds)
    env = dict(os.environ, MOETUNE_FUSION=fusion, PYTHONUNBUFFERED="1")
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"child exited {p.returncode}: {p.stderr[-1500:]}")
    line = next(x for x in p.stdout.splitlines() if x.startswith("RESULT "))
    out = json.loads(line[len("RESULT "):])
    out["process_wall_s"] = time.perf_counter() - t0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", required=True, help="folder holding the reference trainers/")
    ap.add_argument("--out", default="speed.json")
    ap.add_argument("--tokens", type=int, default=1_572_864, help="per training (48 steps)")
    ap.add_argument("--fp8-tokens", type=int, default=1_572_864)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--only", help="comma-separated sections")
    a = ap.parse_args()
    import torch
    device = "cpu" if a.smoke else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench_gpu_speed.py needs a CUDA device (or --smoke)")
    name = "debug" if a.smoke else "proxy-l"
    tokens = 8192 if a.smoke else a.tokens
    warm = 4096 if a.smoke else 131_072
    res: dict = {"date": str(datetime.date.today()), "torch": torch.__version__,
                 "gpu": torch.cuda.get_device_name() if device == "cuda" else "cpu (smoke)",
                 "command": " ".join(sys.argv), "errors": {}, "section_s": {}}
    ref = str(Path(a.ref).resolve())
    here = str(ROOT)

    def section(key, fn):
        if not a.only or key in a.only.split(","):
            run_section(res, a.out, key, fn)

    section("reference_bf16", lambda: child(ref, "eager", name, "bf16", tokens, warm, [0, 1],
                                            device, 240))
    section("compile_bf16", lambda: child(here, "compile", name, "bf16", tokens, warm, [0, 1],
                                          device, 300))
    section("eager_bf16", lambda: child(here, "eager", name, "bf16", tokens, warm, [0],
                                        device, 240))
    import gpu_probe
    gpu_probe.DEVICE = device
    section("profile_compile", lambda: _in_env("compile", lambda: gpu_probe.profile(
        name, 3, None)))
    section("fp8_linear", lambda: _fp8_linears(device))
    section("fp8_train", lambda: child(here, "compile", name, "fp8",
                                       4096 if a.smoke else a.fp8_tokens, warm, [0], device,
                                       300))
    section("concurrency_proxy_m", lambda: gpu_probe.concurrency(
        "debug" if a.smoke else "proxy-m", 8192 if a.smoke else 1_048_576, [1, 2, 4]))
    section("blocks_bf16", lambda: child(here, "blocks", name, "bf16", tokens, warm, [0],
                                         device, 300))
    for key in ("compile_bf16", "eager_bf16", "blocks_bf16"):
        if key in res and "reference_bf16" in res:
            r, n = res["reference_bf16"], res[key]
            res.setdefault("ratios", {})[key] = {
                f"seed{s}": n[f"seed{s}"]["tok_s"] / r[f"seed{s}"]["tok_s"]
                for s in (0, 1) if f"seed{s}" in n}
    Path(a.out).write_text(json.dumps(res, indent=2))
    print(json.dumps(res.get("ratios"), indent=1))


def _in_env(fusion: str, fn):
    os.environ["MOETUNE_FUSION"] = fusion
    from trainers.nn import fusion as fusion_mod
    fusion_mod.mode.cache_clear()
    return fn()


def _fp8_linears(device: str) -> dict:
    import bench_gpu
    bench_gpu.DEVICE = device
    shapes = [(256, 128, 384)] if device == "cpu" else [(32768, 1024, 2632),
                                                         (16384, 7168, 18432)]
    return {"x".join(map(str, s)): bench_gpu.linear_gemms(*s) for s in shapes}


if __name__ == "__main__":
    main()
