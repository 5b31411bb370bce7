"""The service's own cost of one polled status read, without HTTP or other processes: N
sequential ``GET /api/v1/studies/NAME`` sent straight into the ASGI application (routing,
middlewares, the user check, the view cache's answer), CPU and wall time per request.

    python benchmarks/bench_service.py asgi [N]

With ``PYTHONPATH`` set to another checkout it measures that code (the script needs only
``create_app``, ``Service``, ``Auth`` and ``TokenStore``), so two versions can be compared on
the same machine state, alternating. The HTTP server, the clients and the trials are left out:
`bench_service.py load` measures those together.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna


def build_app() -> Any:
    from tuner.app.service import context
    from tuner.app.service.access.auth import Auth
    from tuner.app.service.access.tokens import TokenStore
    from tuner.study.store import database as db
    from tuner.study.store import records
    root = Path(tempfile.mkdtemp(prefix="moetune-asgi-"))
    url = f"sqlite:///{root / 'service.db'}"
    storage = db.open_storage(url)
    study = optuna.create_study(study_name="s", storage=storage)
    study.set_user_attr(records.SERVICE, {"owner": "local", "state": "running"})
    tokens = TokenStore(storage.engine)
    # Auth took the key from the database before it took a key argument
    auth = (Auth(tokens, b"k" * 32) if "key" in inspect.signature(Auth).parameters
            else Auth(tokens))
    service = context.Service(context.ServiceConfig(root=root, storage_url=url), storage, auth,
                              scheduler=None)  # type: ignore[arg-type]  # no scheduler needed
    try:  # the application's module before its routers were split out was web.api
        from tuner.app.service.web.main import create_app
    except ImportError:
        from tuner.app.service.web.api import create_app  # type: ignore[no-redef]
    return create_app(service)


async def one(app: Any) -> int:
    sent: list[dict[str, Any]] = []
    scope = {"type": "http", "method": "GET", "path": "/api/v1/studies/s",
             "raw_path": b"/api/v1/studies/s", "query_string": b"",
             "headers": [(b"host", b"127.0.0.1:8470")], "scheme": "http",
             "server": ("127.0.0.1", 8470), "client": ("127.0.0.1", 5000),
             "http_version": "1.1", "root_path": "", "app": app}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return int(sent[0]["status"])


async def measure(app: Any, n: int) -> tuple[float, float]:
    for _ in range(200):  # warm: the view read once, caches filled
        assert await one(app) == 200
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        await one(app)
    return (time.process_time() - c0) / n * 1e3, (time.perf_counter() - t0) / n * 1e3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("n", metavar="N", nargs="?", type=int, default=3000,
                        help="sequential requests measured (default 3000)")


def run(args: argparse.Namespace) -> int:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    n = args.n
    cpu_ms, wall_ms = asyncio.run(measure(build_app(), n))
    print(f"{n} requests: CPU {cpu_ms:.3f} ms/request, wall {wall_ms:.3f} ms/request")
    return 0

