"""The service's scheduling loop: start queued studies while fewer than ``max_running`` run, and
queue again a study whose driver vanished (its actor died with a node, or with the local Ray of
a restarted service), so nothing claims to run that does not and nothing is left half done.
Everything it knows it reads from the storage on each pass, so a restarted service simply
carries on.

When the storage stops answering, a pass fails and the loop keeps trying; the drivers end on
their own (`driver.run_driver`). The first passes after it answers again mark a study whose
driver vanished during or just after the outage ``failed`` with ``storage unreachable`` (no
slot held, `resume` continues it), rather than queueing it again behind the user's back.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna

from tuner.app.requests.studies import (
    ACTIVE,
    STORAGE_UNREACHABLE,
    record_of,
    service_record,
    set_state,
)
from tuner.app.service.access.quotas import Limits, may_start
from tuner.app.service.running import driver
from tuner.app.service.running.faults import storage_down
from tuner.study.store import records
from tuner.study.store import storage as st

log = logging.getLogger(__name__)
MAX_RESTARTS = 3
OUTAGE_GRACE_S = 120.0  # a driver found gone this soon after an outage ended on it


class Scheduler:
    """Runs `tick` every ``interval_s`` seconds in a daemon thread until `stop`."""

    def __init__(self, *, storage: optuna.storages.BaseStorage, storage_url: str, root: Path,
                 trainer: str, max_running: int, interval_s: float = 1.0,
                 data_roots: tuple[Path, ...] = (), resolve: bool = True,
                 limits_of: Callable[[str], Limits | None] | None = None) -> None:
        self._storage = storage
        # an owner's quotas (`quotas.owner_limits`; None: none), for their trainings at once
        self._limits_of = limits_of
        # where a spec's files may lie, checked again by each driver (`driver.run_driver`)
        self._data_roots = data_roots
        self._resolve = resolve
        self._url = storage_url
        self._root = root
        self._trainer = trainer
        self._max_running = max_running
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="moetune-scheduler",
                                        daemon=True)
        self._outage_at: float | None = None  # when a pass last found the storage down

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=10)

    def wake(self) -> None:
        """Run a pass now (after a submit, cancel or resume)."""
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception as e:  # noqa: BLE001 - a failed pass is logged; the next retries
                if storage_down(e):
                    if self._outage_at is None:
                        log.warning("the storage does not answer (%s); retrying every %.0f s",
                                    type(e).__name__, self._interval_s)
                    self._outage_at = time.monotonic()
                else:
                    log.exception("scheduler pass failed")
            self._wake.wait(self._interval_s)
            self._wake.clear()

    def tick(self) -> None:
        """One pass: notice lost drivers, then start the oldest queued studies whose owner's
        running studies leave room for their trainings (`quotas.may_start`); one that must
        wait for its owner's quota does not hold up the others'."""
        queued, active = [], 0
        running: dict[str, int] = {}  # owner: trainings at once of their studies with a driver
        # every study's record in one read; a study is loaded only when this pass acts on it
        for frozen in self._storage.get_all_studies():
            name, rec = frozen.study_name, record_of(frozen.user_attrs)
            state = rec["state"]
            if state in ACTIVE and not driver.is_running(name):
                if state != "starting" or _stale_start(rec):
                    _driver_lost(st.load_study(name, self._storage),
                                 after_outage=self._after_outage())
                    continue
            owner = str(rec.get("owner", ""))
            if state in ACTIVE:
                active += 1
                running[owner] = running.get(owner, 0) + _trainings_at_once(frozen.user_attrs)
            elif state == "queued":
                queued.append((str(rec.get("submitted_at", "")), name, owner,
                               _trainings_at_once(frozen.user_attrs)))
        slots = self._max_running - active
        for _, name, owner, at_once in sorted(queued):
            if slots <= 0:
                break
            limits = self._limits_of(owner) if self._limits_of else None
            if not may_start(limits, running.get(owner, 0), at_once):
                continue  # waits for its owner's running studies
            running[owner] = running.get(owner, 0) + at_once
            slots -= 1
            set_state(st.load_study(name, self._storage), "starting")
            roots: dict[str, Any] = ({"data_roots": self._data_roots, "resolve": self._resolve}
                     if self._data_roots else {})  # none: the driver re-checks no path
            driver.start(name, storage_url=self._url, root=self._root, trainer=self._trainer,
                         **roots)

    def _after_outage(self) -> bool:
        """Whether the storage was down within `OUTAGE_GRACE_S` (a driver gone now ended on
        it)."""
        return (self._outage_at is not None
                and time.monotonic() - self._outage_at < OUTAGE_GRACE_S)


def _driver_lost(study: optuna.Study, *, after_outage: bool = False) -> None:
    """A driver that vanished (its node, or the local Ray of a restarted service, went away):
    queue the study again, up to `MAX_RESTARTS` times, so it finishes from what the storage
    holds; a cancel that was under way ends as cancelled; a driver that ended because the
    storage did not answer leaves its study failed, for its owner to resume."""
    rec = service_record(study)
    if rec["state"] == "stopping":
        set_state(study, "cancelled")
    elif after_outage:
        set_state(study, "failed", error=f"{STORAGE_UNREACHABLE}: its driver ended while the "
                  "database did not answer; resume it (finished trials are kept)")
    elif int(rec.get("restarts", 0)) < MAX_RESTARTS:
        set_state(study, "queued", restarts=int(rec.get("restarts", 0)) + 1,
                  error="its driver was lost; queued again (finished trials are kept)")
    else:
        set_state(study, "interrupted", error=f"its driver was lost {MAX_RESTARTS + 1} times; "
                  "resume it once the cause is fixed")


def _trainings_at_once(attrs: dict[str, Any]) -> int:
    """The trainings a study runs at once (its stored spec's ``max_concurrent``)."""
    spec = attrs.get(records.SPEC)
    study = spec.get("study") if isinstance(spec, dict) else None
    value = study.get("max_concurrent", 1) if isinstance(study, dict) else 1
    return value if isinstance(value, int) else 1


def _stale_start(rec: dict[str, Any], grace_s: float = 120.0) -> bool:
    """A study (its service record) left in ``starting`` longer than ``grace_s`` without an
    actor: its start failed."""
    started = rec.get("started_at")
    if not started:
        return True
    age = dt.datetime.now(dt.UTC) - dt.datetime.fromisoformat(started)
    return age.total_seconds() > grace_s
