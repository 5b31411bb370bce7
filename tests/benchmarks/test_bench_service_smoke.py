"""The service benchmark (`benchmarks/bench_service.py MODE`, one module per mode in
benchmarks/service/): the entry point lists its four modes, each mode's --help works, and the
`asgi` and `app` modes measure a few requests in process (no server, no Ray)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import bench_service  # noqa: E402
from benchmarks.service import MODES  # noqa: E402


def test_every_mode_is_a_subcommand_of_the_one_entry_point(capsys):
    assert set(MODES) == {"load", "app", "asgi", "page"}
    for mode in MODES:
        with pytest.raises(SystemExit) as e:
            bench_service.main([mode, "--help"])
        assert e.value.code == 0
        assert f"python benchmarks/bench_service.py {mode}" in capsys.readouterr().out
    old = ["bench_service_app.py", "bench_service_asgi.py", "bench_service_page.py"]
    assert not [name for name in old if (ROOT / "benchmarks" / name).exists()]


def test_the_script_lists_the_four_modes():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_service.py"),
                           "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    listed = {line.split()[0] for line in proc.stdout.splitlines()
              if line.startswith("    ") and line.split()}
    assert set(MODES) <= listed, proc.stdout


def test_asgi_measures_a_few_status_reads(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # its database, not in /tmp
    assert bench_service.main(["asgi", "20"]) == 0
    out = capsys.readouterr().out
    assert "20 requests: CPU " in out and " ms/request, wall " in out, out


def test_app_measures_both_paths_and_the_ablation(capsys):
    """The app mode against this checkout's service (it broke once, unseen, when Auth took a
    key argument)."""
    assert bench_service.main(["app", "--requests", "20", "--concurrency", "2", "--ablate"]) == 0
    out = capsys.readouterr().out
    assert out.count("ms CPU per request") == 5, out
    assert "GET /api/v1/studies/bench" in out and "also without the user middleware" in out
