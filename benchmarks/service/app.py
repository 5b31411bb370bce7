"""CPU per request of the service's application alone: the FastAPI app called in process through
ASGI (no network, no uvicorn, no Ray), ``--concurrency`` requests in flight at once.

    python benchmarks/bench_service.py app [--requests 3000] [--concurrency 50] [--ablate]

Serves a plain Optuna study of 40 two-objective trials from a temporary SQLite database, with
one token configured (requests carry it). Measures ``GET /api/v1/studies/NAME`` (the polled
status read) and ``GET /api/v1/whoami`` (no study read). ``--ablate`` then measures ``whoami``
again with parts of the stack taken out, one after the other: the database read of whether
tokens exist (``Auth.required`` made a constant), then the database read of the token's user
(the token store's lookups memoized), then every user middleware. It runs against
whichever moetune is on ``sys.path`` (``PYTHONPATH=OLD_CHECKOUT`` measures an older commit).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import inspect
import tempfile
import time
from pathlib import Path
from typing import Any


def build(tmp: Path) -> tuple[Any, Any, str]:
    """(app, service, token) over a fresh database holding the study ``bench``."""
    import optuna

    from tuner.app.service.access.auth import Auth
    from tuner.app.service.access.tokens import TokenStore
    from tuner.app.service.context import Service, ServiceConfig
    try:  # the application's module before its routers were split out was web.api
        from tuner.app.service.web.main import create_app
    except ImportError:
        from tuner.app.service.web.api import create_app  # type: ignore[no-redef]
    from tuner.study.store.database import open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{tmp / 'bench.db'}"
    storage = open_storage(url)
    study = optuna.create_study(study_name="bench", storage=storage,
                                directions=["minimize", "maximize"])
    for i in range(40):
        study.add_trial(optuna.trial.create_trial(
            params={"lr": 1e-3 * (1 + i)},
            distributions={"lr": optuna.distributions.FloatDistribution(1e-4, 1.0, log=True)},
            values=[3.0 + (i % 7) / 10, 1e4 * (1 + i % 5)]))
    tokens = TokenStore(storage.engine)
    token = tokens.create("bench")
    # Auth took the key from the database before it took a key argument (as in asgi.py)
    auth = (Auth(tokens, b"k" * 32) if "key" in inspect.signature(Auth).parameters
            else Auth(tokens))
    service = Service(ServiceConfig(root=tmp, storage_url=url), storage, auth,
                      None)  # type: ignore[arg-type]  # no scheduler: the lifespan never runs
    return create_app(service), service, token


async def cpu_ms_per_request(app: Any, path: str, token: str, n: int, concurrency: int) -> float:
    headers = [(b"host", b"bench"), (b"authorization", f"Bearer {token}".encode())]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": b"", "root_path": "", "headers": headers,
             "server": ("127.0.0.1", 8470), "client": ("127.0.0.1", 50000)}

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def one() -> None:
        status: list[int] = []

        async def send(message: dict) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])

        await app(dict(scope), receive, send)
        assert status == [200], (path, status)

    async def client(k: int) -> None:
        for _ in range(k):
            await one()

    await asyncio.gather(*[client(20) for _ in range(concurrency)])  # warm the caches
    t0 = time.process_time()
    await asyncio.gather(*[client(n // concurrency) for _ in range(concurrency)])
    return 1000 * (time.process_time() - t0) / (n // concurrency * concurrency)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--ablate", action="store_true")


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        app, service, token = build(Path(tmp))

        def measure(label: str, path: str) -> None:
            ms = asyncio.run(cpu_ms_per_request(app, path, token, args.requests,
                                                args.concurrency))
            print(f"{label:58s} {ms:.3f} ms CPU per request")

        measure("GET /api/v1/studies/bench", "/api/v1/studies/bench")
        measure("GET /api/v1/whoami", "/api/v1/whoami")
        if args.ablate:
            required = service.auth.required()
            service.auth.required = lambda: required
            measure("  whoami, without the read of whether tokens exist", "/api/v1/whoami")
            store = service.auth._tokens
            for lookup in ("user", "user_by_digest"):  # the latter only in newer code
                if hasattr(store, lookup):
                    setattr(store, lookup, functools.cache(getattr(store, lookup)))
            measure("  whoami, also without the read of the token's user", "/api/v1/whoami")
            app.user_middleware.clear()
            app.middleware_stack = None  # rebuilt without them on the next request
            measure("  whoami, also without the user middleware", "/api/v1/whoami")
    return 0

