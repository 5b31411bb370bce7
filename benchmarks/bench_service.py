"""The service under load: status-read latency with many clients polling while studies run, and
the time from a submit to the study's first running trial.

    python benchmarks/bench_service.py [--clients 50] [--seconds 20] [--write]

Starts `moetune serve` (local Ray, the fake `tuner.testing:slow_train`, so the trials cost
~1 s each and the measurement is of the service, not of training), submits two studies, then
runs ``--clients`` threads that each poll ``GET /api/v1/studies/<name>`` (the study page's
read: state, progress, trials, front) back to back for ``--seconds``. Latency is measured per
request on the client side. Submit-to-first-trial is measured on a warm service (Ray started,
one study done): from the POST to the first poll that shows a trial running.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "tuner"))
from service_process import SPEC, Server  # noqa: E402

RESULTS = Path(__file__).with_name("RESULTS.md")


def poll(server: Server, name: str, until: float, out: list[float]) -> None:
    while time.monotonic() < until:
        t0 = time.perf_counter()
        status, _ = server.call("GET", f"/api/v1/studies/{name}")
        if status == 200:
            out.append(time.perf_counter() - t0)


def first_trial_s(server: Server, name: str, n: int) -> float:
    t0 = time.monotonic()
    status, body = server.call("POST", "/api/v1/studies", {"spec": SPEC.format(name=name, n=n)})
    assert status == 201, body
    while True:
        status, body = server.call("GET", f"/api/v1/studies/{name}")
        if body["progress"]["running"] > 0 or body["progress"]["done"] > 0:
            return time.monotonic() - t0
        time.sleep(0.05)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--write", action="store_true", help="append the figures to RESULTS.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(Path(tmp) / "root").start()
        try:
            warmup = first_trial_s(server, "warmup", 2)
            server.wait_state("warmup", ("finished",))
            to_first = [first_trial_s(server, f"first-{i}", 2) for i in range(3)]
            for i in range(3):
                server.wait_state(f"first-{i}", ("finished",))
            for name in ("load-a", "load-b"):
                server.call("POST", "/api/v1/studies", {"spec": SPEC.format(name=name, n=40)})
            server.wait_trials_running("load-a")
            latencies: list[float] = []
            until = time.monotonic() + args.seconds
            threads = [threading.Thread(target=poll, args=(server, "load-a", until, latencies))
                       for _ in range(args.clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            _, body = server.call("GET", "/api/v1/studies/load-a")
        finally:
            server.stop()
    q = statistics.quantiles(latencies, n=100)
    out = {"clients": args.clients, "seconds": args.seconds, "requests": len(latencies),
           "p50_ms": 1000 * q[49], "p95_ms": 1000 * q[94], "max_ms": 1000 * max(latencies),
           "trials_in_study_at_end": len(body["trials"]),
           "first_trial_cold_s": warmup, "first_trial_warm_s": to_first}
    print(json.dumps(out, indent=2))
    if args.write:
        with RESULTS.open("a") as f:
            f.write(_section(out))
    return 0


def _section(o: dict) -> str:
    warm = ", ".join(f"{x:.2f}" for x in o["first_trial_warm_s"])
    return (f"\n## Service under load\n\n"
            f"`python benchmarks/bench_service.py --clients {o['clients']} --seconds "
            f"{o['seconds']:g} --write` (this 2-core machine; the service, its local Ray, two "
            f"running studies of the fake 1 s trainer and the {o['clients']} polling clients "
            f"all share it).\n\n"
            f"| measure | value | target |\n|---|---|---|\n"
            f"| status read (`GET /api/v1/studies/NAME`), p50 | {o['p50_ms']:.0f} ms | |\n"
            f"| status read, p95 ({o['requests']} requests, {o['clients']} clients, study of "
            f"up to {o['trials_in_study_at_end']} trials) | {o['p95_ms']:.0f} ms | <= 200 ms |\n"
            f"| status read, max | {o['max_ms']:.0f} ms | |\n"
            f"| submit to first running trial, warm service (3 runs) | {warm} s | <= 10 s |\n"
            f"| submit to first running trial, first study after start | "
            f"{o['first_trial_cold_s']:.2f} s | |\n")


if __name__ == "__main__":
    sys.exit(main())
