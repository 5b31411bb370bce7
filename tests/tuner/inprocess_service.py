"""The service's real application in this process, for the fast test tier: FastAPI's
`TestClient` over `create_app`, a SQLite storage under a temporary root, and study drivers in
threads that run the fake trainers of `tuner.testing`, with no Ray and no server process.

What is real: the app, its auth and tokens, `Service` and its actions, the `Scheduler` (its
loop, its queue, a lost driver's rule), the driver (`driver.run_driver`: the preflight, the
state moves, a law's budgets and a ladder's rungs), the runner (`runner.run`: lease, reaping,
stop flags) and every trial's recording (`StudySearcher`, `trainable.run_trial`). What stands
in for Ray:

- a driver is a thread (`ThreadDrivers`) where `serve` starts a detached Ray actor;
- Ray Tune's trial loop is `fit_in_threads`: ``max_concurrent`` threads, each asking the
  searcher for a trial, running `trainable.run_trial` and passing its reports on, the searcher
  called under one lock as Tune's controller calls it from one thread. A stop (cancel) ends
  every running trial at its next report, as Tune's stopper does. It has no ASHA and no trial
  time limit: pruning, timeouts, worker deaths and the cluster checks are the integration
  tier's (test_service.py, test_service_faults.py, test_tuner_*.py).

A plain module (not conftest.py), imported by the service tests::

    with inprocess_service(tmp_path / "root") as svc:
        status, body = svc.call("POST", "/api/v1/studies", {"spec": SPEC.format(...)})
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient
from service_spec import SPEC, StudyWaits  # noqa: F401 - the tests import SPEC from here

from tuner import testing
from tuner.app.serve_command import _private_root, service_url
from tuner.app.service.access.auth import LOCAL, Auth
from tuner.app.service.access.private import csrf_key
from tuner.app.service.access.quotas import owner_limits
from tuner.app.service.access.tokens import TokenStore
from tuner.app.service.context import Service, ServiceConfig
from tuner.app.service.running import driver
from tuner.app.service.running import scheduler as scheduler_module
from tuner.app.service.running.scheduler import Scheduler
from tuner.app.service.web.main import create_app
from tuner.study.run import runner
from tuner.study.store import database as db
from tuner.study.trial import cluster, trainable

BASE_URL = "http://127.0.0.1:8470"  # a loopback Host: an open service answers only those

# 0.1 s per evaluation: a law's or a ladder's every stage in seconds, a trial still seen running
brisk_train = functools.partial(testing.quick_train, seconds_per_eval=0.1)


class TrialStopped(SystemExit):
    """Raised inside a trial's report once its run is stopping: the trial ends there, without
    its final report, as a trial Ray Tune stops does. A SystemExit, which
    `trainable.train_and_report` lets through (it records every other exception)."""


@dataclass
class _Trial:
    """One trial in flight: where its reports go (`TuneReports`)."""

    trial_id: str
    searcher: Any  # StudySearcher
    lock: threading.Lock
    stopping: Any  # is_set(): the run's stop, or the drivers' halt
    last: dict[str, Any] | None = None

    def report(self, metrics: dict[str, Any]) -> None:
        result = dict(metrics)
        with self.lock:
            self.searcher.on_trial_result(self.trial_id, result)
        self.last = result
        if self.stopping.is_set():
            raise TrialStopped


class TuneReports:
    """Stands in for ``ray.tune`` inside `trainable`: a trial's ``tune.report`` goes to the
    trial this thread runs."""

    def __init__(self) -> None:
        self._local = threading.local()

    @contextlib.contextmanager
    def running(self, trial: _Trial) -> Iterator[None]:
        self._local.trial = trial
        try:
            yield
        finally:
            self._local.trial = None

    def report(self, metrics: dict[str, Any], **_: Any) -> None:
        trial = getattr(self._local, "trial", None)
        assert trial is not None, "tune.report outside a trial run by fit_in_threads"
        trial.report(metrics)


@dataclass
class _AnyOf:
    flags: tuple[Any, ...]

    def is_set(self) -> bool:
        return any(f is not None and f.is_set() for f in self.flags)


def fit_in_threads(spec: Any, searcher: Any, *, run_dir: Path, trainer: Any, n_samples: int,
                   stop: Any = None, interrupt: Any = None, reports: TuneReports,
                   halted: threading.Event) -> None:
    """`runner._fit` without Ray: ``n_samples`` trials, ``spec.study.max_concurrent`` at once,
    each `trainable.run_trial` in a thread of this process. ``interrupt`` (the CLI's Ctrl-C) is
    never passed by a service's driver."""
    stopping = _AnyOf((stop, halted))
    lock = threading.Lock()
    numbers = itertools.count()
    errors: list[BaseException] = []
    job = runner._job(spec, searcher)

    def worker() -> None:
        while not stopping.is_set():
            with lock:
                i = next(numbers)
                config = searcher.suggest(f"inprocess_{i:05d}") if i < n_samples else None
            if not isinstance(config, dict):  # Searcher.FINISHED, or every sample started
                return
            trial = _Trial(trial_id=f"inprocess_{i:05d}", searcher=searcher, lock=lock,
                           stopping=stopping)
            with contextlib.suppress(TrialStopped), reports.running(trial):
                trainable.run_trial(config, job=job, trainer=trainer)
            with lock:
                searcher.on_trial_complete(trial.trial_id, trial.last)

    def guarded() -> None:
        try:
            worker()
        except BaseException as e:  # noqa: BLE001 - raised in the driver's thread below
            errors.append(e)

    threads = [threading.Thread(target=guarded, name=f"trial-{k}", daemon=True)
               for k in range(max(1, spec.study.max_concurrent))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


class ThreadDrivers:
    """`driver.start` and `driver.is_running` for the scheduler: each study's driver
    (`driver.run_driver`, unchanged) in a thread of this process instead of a Ray actor."""

    def __init__(self) -> None:
        self.halted = threading.Event()  # the fixture's end: every trial stops
        self.ended: dict[str, str] = {}  # study: what its last driver returned
        self._threads: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()

    def start(self, name: str, *, storage_url: str, root: Path, trainer: str) -> None:
        with self._lock:
            if self.is_running(name) or self.halted.is_set():
                return
            t = threading.Thread(target=self._run, args=(name, storage_url, root, trainer),
                                 name=f"driver:{name}", daemon=True)
            self._threads[name] = t
            t.start()

    def _run(self, name: str, storage_url: str, root: Path, trainer: str) -> None:
        self.ended[name] = driver.run_driver(name, storage_url, str(root), trainer)

    def is_running(self, name: str) -> bool:
        t = self._threads.get(name)
        return t is not None and t.is_alive()

    def halt(self, timeout_s: float = 120.0) -> None:
        """Stop every running trial and wait for the drivers to end."""
        self.halted.set()
        for t in list(self._threads.values()):
            t.join(timeout_s)


@dataclass
class InProcessService(StudyWaits):
    """The app behind `TestClient`, with `service_process.Server`'s client methods."""

    TRIALS_WAIT_S = 60.0
    STATE_WAIT_S = 120.0
    POLL_S = 0.1

    root: Path
    storage_url: str
    client: TestClient
    service: Service
    drivers: ThreadDrivers
    tokens: dict[str, str] = field(default_factory=dict)  # user: token
    url: str = BASE_URL

    def call(self, method: str, path: str, body: Any = None, *, token: str | None = None,
             headers: dict[str, str] | None = None, raw: bytes | None = None
             ) -> tuple[int, Any]:
        """(status, decoded JSON or text) of one request, as `Server.call` sends it."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None
                                            else None)
        sent = {"Content-Type": "application/json", **(headers or {})}
        if token:
            sent["Authorization"] = f"Bearer {token}"
        self.client.cookies.clear()  # as urllib: no cookie a response set is sent back
        r = self.client.request(method, path, content=data, headers=sent)
        return r.status_code, _decode(r.content, r.headers.get("content-type", ""))



@contextlib.contextmanager
def inprocess_service(root: Path, *, trainer: str = "tuner.testing:slow_train",
                      users: tuple[tuple[str, bool], ...] = (), open_allowed: bool = True,
                      max_running: int = 2, **config: Any) -> Iterator[InProcessService]:
    """The service `moetune serve --root ROOT --trainer TRAINER` builds, in this process.

    Args:
        users: (user, admin) pairs to create a token for before it starts, as
            ``moetune token create`` does; their tokens are in ``.tokens``. None: open mode.
        open_allowed: False for a service bound beyond loopback (`Auth`'s rule).
        config: more `ServiceConfig` fields (``data_roots``, ``max_trials``, ...).
    """
    root = root.resolve()
    _private_root(root, "")
    url = service_url(root, "")
    storage = db.open_storage(url)
    store = TokenStore(storage.engine)
    tokens = {user: store.create(user, admin=admin) for user, admin in users}
    threads = torch.get_num_threads()  # run_trial sets this process's, as a worker's
    drivers, reports = ThreadDrivers(), TuneReports()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(scheduler_module, "driver", drivers)
        mp.setattr(runner, "_fit", functools.partial(fit_in_threads, reports=reports,
                                                     halted=drivers.halted))
        for module in (runner, cluster):  # a law's and a ladder's stages look it up here
            mp.setattr(module, "ray_cluster", _no_ray)
        mp.setattr(trainable, "tune", reports)
        cfg = ServiceConfig(root=root, storage_url=url, trainer=trainer,
                            max_running=max_running, **config)
        scheduler = Scheduler(storage=storage, storage_url=url, root=root, trainer=trainer,
                              max_running=max_running,
                              limits_of=owner_limits(cfg.quotas, store, local=LOCAL.name))
        service = Service(cfg, storage, Auth(store, csrf_key(root), open_allowed=open_allowed),
                          scheduler)
        try:
            # a handler's exception is a 500 to the client, as from uvicorn, not a raise here
            with TestClient(create_app(service), base_url=BASE_URL,
                            raise_server_exceptions=False) as client:
                yield InProcessService(root=root, storage_url=url, client=client,
                                       service=service, drivers=drivers, tokens=tokens)
        finally:
            drivers.halt()
            torch.set_num_threads(threads)


@contextlib.contextmanager
def _no_ray(address: str | None, spec: Any) -> Iterator[None]:
    yield


def _decode(raw: bytes, content_type: str) -> Any:
    if "json" in content_type:
        return json.loads(raw or b"null")
    return raw.decode(errors="replace")
