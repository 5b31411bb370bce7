"""The GPU profile and side-by-side scripts run on the CPU (--smoke), so they are ready when a
device is lent: the profile's tables fill, the side-by-side trains the reference and this tree
in their own processes with the fusion mode each asked for."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def test_gpu_probe_smoke(tmp_path):
    out = tmp_path / "probe.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_probe.py"), "--smoke", "--only",
         "profile,fp8_api", "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=ENV)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(out.read_text())
    assert res["errors"] == {}
    prof = res["profile"]
    assert prof["wall_ms_per_step"] > 0 and prof["tokens_per_step"] > 0
    assert prof["top_cpu_ops_self_ms_per_step"]  # the CPU's op table (no kernels on a CPU)
    assert "F.ScalingType" in res["fp8_api"] and "torch._scaled_mm" in res["fp8_api"]


def test_bench_gpu_speed_smoke_runs_reference_and_tree(tmp_path):
    ref = tmp_path / "ref"
    shutil.copytree(ROOT / "trainers", ref / "trainers")
    out = tmp_path / "speed.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_gpu_speed.py"), "--smoke", "--ref",
         str(ref), "--only", "reference_bf16,compile_bf16", "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=ENV)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(out.read_text())
    assert res["errors"] == {}
    for key in ("reference_bf16", "compile_bf16"):
        for seed in ("seed0", "seed1"):
            assert res[key][seed]["tok_s"] > 0 and res[key][seed]["steps"] >= 1
    # on a CPU no fused path runs: the same seed gives the same loss in both trees
    assert res["compile_bf16"]["seed0"]["val_loss"] == res["reference_bf16"]["seed0"]["val_loss"]
    assert set(res["ratios"]["compile_bf16"]) == {"seed0", "seed1"}
