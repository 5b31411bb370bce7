"""The service under load: status-read latency with many clients polling while studies run, and
the time from a submit to the study's first running trial.

    python benchmarks/bench_service.py load [--clients 50] [--seconds 20] [--floor] [--write]

Starts `moetune serve` (local Ray, the fake `tuner.testing:slow_train`, so the trials cost
~1 s each and the measurement is of the service, not of training), submits two studies, then
runs ``--clients`` threads that each poll ``GET /api/v1/studies/<name>`` (the study page's
read: state, progress, trials, front) back to back for ``--seconds``. Latency is measured per
request on the client side; the service's CPU time per request is its process's CPU time
(/proc) over the window divided by the requests served (it includes the service's other work
meanwhile: the scheduler, the view reads). ``--floor`` then runs the same load against
``GET /api/v1/whoami`` (same server, routing and token check, no study read): what the status
read cannot beat on this machine. Submit-to-first-trial is measured on a warm service (Ray
started, one study done): from the POST to the first poll that shows a trial running.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "tuner"))
from service_process import SPEC, Server  # noqa: E402

from benchmarks.results_md import write_section  # noqa: E402

LATEST = "## Service under load: the latest `load --write` run"


def poll(server: Server, path: str, until: float, out: list[float]) -> None:
    while time.monotonic() < until:
        t0 = time.perf_counter()
        status, _ = server.call("GET", path)
        if status == 200:
            out.append(time.perf_counter() - t0)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load(server: Server, path: str, clients: int, seconds: float) -> dict:
    """``clients`` threads polling ``path`` back to back for ``seconds``."""
    assert server.proc is not None
    latencies: list[float] = []
    cpu0 = cpu_s(server.proc.pid)
    until = time.monotonic() + seconds
    threads = [threading.Thread(target=poll, args=(server, path, until, latencies))
               for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cpu = cpu_s(server.proc.pid) - cpu0
    q = statistics.quantiles(latencies, n=100)
    return {"requests": len(latencies), "p50_ms": 1000 * q[49], "p95_ms": 1000 * q[94],
            "max_ms": 1000 * max(latencies), "server_cpu_ms_per_request":
            1000 * cpu / len(latencies)}


def first_trial_s(server: Server, name: str, n: int) -> float:
    t0 = time.monotonic()
    status, body = server.call("POST", "/api/v1/studies", {"spec": SPEC.format(name=name, n=n)})
    assert status == 201, body
    while True:
        status, body = server.call("GET", f"/api/v1/studies/{name}")
        if body["progress"]["running"] > 0 or body["progress"]["done"] > 0:
            return time.monotonic() - t0
        time.sleep(0.05)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--floor", action="store_true",
                        help="also measure GET /api/v1/whoami under the same load")
    parser.add_argument("--write", action="store_true",
                        help=f"write the figures to RESULTS.md under {LATEST!r} (replaced on "
                             "each run; the narrative section above it is kept)")


def run(args: argparse.Namespace) -> int:
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(Path(tmp) / "root").start()
        try:
            warmup = first_trial_s(server, "warmup", 2)
            server.wait_state("warmup", ("finished",))
            # one after another, each into a free slot: the measure is the service's start-up
            # of a study, not the queue (3 back-to-back submits with 2 slots made the third wait)
            to_first = []
            for i in range(3):
                to_first.append(first_trial_s(server, f"first-{i}", 2))
                server.wait_state(f"first-{i}", ("finished",))
            for name in ("load-a", "load-b"):
                server.call("POST", "/api/v1/studies", {"spec": SPEC.format(name=name, n=40)})
            server.wait_trials_running("load-a")
            status_read = load(server, "/api/v1/studies/load-a", args.clients, args.seconds)
            _, body = server.call("GET", "/api/v1/studies/load-a")
            floor = (load(server, "/api/v1/whoami", args.clients, args.seconds)
                     if args.floor else None)
        finally:
            server.stop()
    out = {"clients": args.clients, "seconds": args.seconds, **status_read,
           "trials_in_study_at_end": len(body["trials"]),
           "first_trial_cold_s": warmup, "first_trial_warm_s": to_first,
           "load_average_before": load_before,
           **({"floor_whoami": floor} if floor else {})}
    print(json.dumps(out, indent=2))
    if args.write:
        write_section(LATEST, _section(out))
    return 0


def _section(o: dict) -> str:
    warm = ", ".join(f"{x:.2f}" for x in o["first_trial_warm_s"])
    return (f"`python benchmarks/bench_service.py load --clients {o['clients']} --seconds "
            f"{o['seconds']:g} --write` (this 2-core machine; the service, its local Ray, two "
            f"running studies of the fake 1 s trainer and the {o['clients']} polling clients "
            f"all share it).\n\n"
            f"| measure | value | target |\n|---|---|---|\n"
            f"| status read (`GET /api/v1/studies/NAME`), p50 | {o['p50_ms']:.0f} ms | |\n"
            f"| status read, p95 ({o['requests']} requests, {o['clients']} clients, study of "
            f"up to {o['trials_in_study_at_end']} trials) | {o['p95_ms']:.0f} ms | <= 200 ms |\n"
            f"| status read, max | {o['max_ms']:.0f} ms | |\n"
            f"| service CPU per status read (measured, /proc) | "
            f"{o['server_cpu_ms_per_request']:.2f} ms | |\n"
            + (f"| floor: `GET /api/v1/whoami` under the same load, p50 / p95 | "
               f"{o['floor_whoami']['p50_ms']:.0f} / {o['floor_whoami']['p95_ms']:.0f} ms | |\n"
               if "floor_whoami" in o else "") +
            f"| submit to first running trial, warm service (3 runs) | {warm} s | <= 10 s |\n"
            f"| submit to first running trial, first study after start | "
            f"{o['first_trial_cold_s']:.2f} s | |\n"
            f"| load average (1, 5, 15 min) before the run | "
            f"{', '.join(f'{x:.1f}' for x in o['load_average_before'])} | |\n")

