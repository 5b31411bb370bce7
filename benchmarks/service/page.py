"""How soon a finished study's page shows something, in a real browser against a real service.

A real `moetune serve` (the test harness `tests/tuner/service_process.py`) runs the quickstart
spec with the shaped fake trainer (`tuner.testing:shaped_train`: seconds, not hours) to its
end; headless Chromium (`tests/browser.py`) then opens the study's page ``--loads`` times and
times, from the navigation, when the state is shown and when the Pareto front and the trial
table are drawn. Measured, wall clock, on this machine; needs Chromium on PATH.

    python benchmarks/bench_service.py page [--loads 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SHOWN = "document.getElementById('state')?.textContent"
DRAWN = ("document.querySelectorAll('#front circle').length > 0 && "
         "document.querySelectorAll('#trials tbody tr').length > 0")


def _until(browser, expression: str, t0: float, timeout_s: float = 60.0) -> float:
    """Seconds from ``t0`` until ``expression`` is truthy in the page."""
    while time.monotonic() - t0 < timeout_s:
        try:
            if browser.evaluate(expression):
                return time.monotonic() - t0
        except RuntimeError:  # the page is still navigating
            pass
        time.sleep(0.02)
    raise TimeoutError(f"{expression!r} not true within {timeout_s} s")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--loads", type=int, default=3)


def run(args: argparse.Namespace) -> int:
    # here, not at import: the other modes' imports keep their sys.path
    sys.path[:0] = [str(ROOT / "tests" / "tuner"), str(ROOT / "tests"), str(ROOT)]
    from browser import Browser
    from service_process import Server

    root = Path(tempfile.mkdtemp(prefix="moetune-page-")) / "root"
    server = Server(root, trainer="tuner.testing:shaped_train").start()
    try:
        spec = (ROOT / "search_spaces" / "quickstart.toml").read_text()
        status, body = server.call("POST", "/api/v1/studies", {"spec": spec})
        assert status == 201, body
        view = server.wait_state("quickstart", ("finished", "failed", "cancelled"),
                                 timeout_s=900)
        print(f"study quickstart {view['state']}, {view['progress']['done']} trials")
        with Browser(size=(1300, 1000)) as browser:
            for load in range(1, args.loads + 1):
                t0 = time.monotonic()
                browser.cdp.call("Page.navigate", url=f"{server.url}/studies/quickstart")
                shown = _until(browser, SHOWN, t0)
                drawn = _until(browser, DRAWN, t0)
                print(f"load {load}: state shown after {shown:.2f} s, front and trial table "
                      f"drawn after {drawn:.2f} s")
    finally:
        server.stop()
    return 0
