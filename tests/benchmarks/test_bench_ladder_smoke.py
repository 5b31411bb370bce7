"""The ladder benchmark runs end to end at toy size (--smoke): a ladder through the product's
path, every candidate at the top, the noise-aware ladder, the µP/SP sweep and its summary."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_ladder_smoke(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_ladder.py"), "--smoke"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "### Compute to reach the top width's answer" in out
    assert "noise measured on every rung" in out
    assert "| µP (base 16) |" in out and "| standard |" in out
