"""One driver per study: a lease row in the study's own database.

A driver (``submit``, ``resume``, a service's study actor) takes the study's lease before it
creates, reaps or runs the study, renews it while it runs (a heartbeat every `HEARTBEAT_S`
seconds) and releases it when it stops. Another driver finds the lease held and stops with
`LeaseHeld`, which names the holder and since when. A lease whose holder died is taken over: at
once when the holder ran on this host and its process is gone (``kill -9`` then ``resume``), else
once its heartbeat is older than `STALE_S` seconds.

The lease lives in the table ``moetune_leases`` next to Optuna's tables, so it works for every
database a study can live in (SQLite, PostgreSQL) and is as durable as the study. Taking it is
one atomic statement (an INSERT, or an UPDATE guarded by the row's current holder), so two
drivers starting at the same moment cannot both win. Heartbeats use each driver's clock: hosts
sharing a database need clocks within `STALE_S` of each other. Imports SQLAlchemy only.

    >>> lease = acquire(storage.engine, "my-study")       # doctest: +SKIP
    >>> lease.renew(); lease.release()                     # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import datetime as dt
import getpass
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa

HEARTBEAT_S = 10.0
STALE_S = 60.0  # six missed heartbeats: the holder is dead or cut off from the database

_META = sa.MetaData()
LEASES = sa.Table(
    "moetune_leases", _META,
    sa.Column("study", sa.String(512), primary_key=True),
    sa.Column("token", sa.String(64), nullable=False),  # this driver's own random id
    sa.Column("holder", sa.String(512), nullable=False),  # user@host pid N, for people
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("started", sa.String(64), nullable=False),  # the process' start time (Linux)
    sa.Column("since", sa.Float, nullable=False),  # epoch seconds
    sa.Column("heartbeat", sa.Float, nullable=False),
)


class LeaseHeld(RuntimeError):
    """Another live driver holds the study; the message names it and since when."""


class LeaseLost(RuntimeError):
    """This driver's lease was taken over (its heartbeats stopped reaching the database)."""


@dataclass(frozen=True)
class Holder:
    """Who holds a lease (a row of ``moetune_leases``)."""

    study: str
    token: str
    holder: str
    host: str
    pid: int
    started: str
    since: float
    heartbeat: float

    def describe(self, now: float) -> str:
        since = dt.datetime.fromtimestamp(self.since, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        return (f"{self.holder} since {since} (last heartbeat {max(0.0, now - self.heartbeat):.0f}"
                " s ago)")


class Lease:
    """A lease this process holds; `renew` keeps it, `release` gives it up."""

    def __init__(self, engine: sa.Engine, study: str, token: str) -> None:
        self.engine = engine
        self.study = study
        self.token = token

    def renew(self, now: float | None = None) -> bool:
        """Refresh the heartbeat; False if the lease is no longer ours (taken over)."""
        stamp = time.time() if now is None else now
        with self.engine.begin() as con:
            n = con.execute(sa.update(LEASES)
                            .where(LEASES.c.study == self.study, LEASES.c.token == self.token)
                            .values(heartbeat=stamp)).rowcount
        return n == 1

    def release(self) -> None:
        with self.engine.begin() as con:
            con.execute(sa.delete(LEASES).where(LEASES.c.study == self.study,
                                                LEASES.c.token == self.token))


def acquire(engine: sa.Engine, study: str, *, stale_s: float = STALE_S,
            now: float | None = None) -> Lease:
    """Take the lease of ``study``, or take over one whose holder is dead.

    Raises:
        LeaseHeld: a live driver holds it (the message names it, since when, and what to do).
    """
    _create_table(engine)
    stamp = time.time() if now is None else now
    me = _me(study, stamp)
    with contextlib.suppress(sa.exc.IntegrityError), engine.begin() as con:
        con.execute(sa.insert(LEASES).values(**me))
        return Lease(engine, study, me["token"])
    current = holder(engine, study)
    if current is None:  # released between our insert and our look: try once more
        return acquire(engine, study, stale_s=stale_s, now=now)
    _refuse_if_live(current, stamp, stale_s)
    with engine.begin() as con:  # compare-and-swap on the dead holder's token
        n = con.execute(sa.update(LEASES)
                        .where(LEASES.c.study == study, LEASES.c.token == current.token)
                        .values(**me)).rowcount
    if n != 1:  # another driver took it over first
        return acquire(engine, study, stale_s=stale_s, now=now)
    return Lease(engine, study, me["token"])


def check_free(engine: sa.Engine, study: str, *, stale_s: float = STALE_S) -> None:
    """Raise `LeaseHeld` if a live driver holds ``study`` (a read: takes nothing). Commands
    call it before starting Ray, so the refusal comes at once; `acquire` decides for real."""
    current = holder(engine, study)
    if current is not None:
        _refuse_if_live(current, time.time(), stale_s)


def _refuse_if_live(current: Holder, now: float, stale_s: float) -> None:
    if not _is_dead(current, now, stale_s):
        raise LeaseHeld(
            f"study {current.study!r} is being run by another driver: {current.describe(now)}. "
            f"Wait for it to finish or stop it; if it died, its lease is taken over "
            f"{stale_s:.0f} s after its last heartbeat (at once on the same host).")


def holder(engine: sa.Engine, study: str) -> Holder | None:
    """Who holds the lease of ``study`` now (None if nobody, or no lease table yet)."""
    if not sa.inspect(engine).has_table(LEASES.name):
        return None
    with engine.connect() as con:
        row = con.execute(sa.select(LEASES).where(LEASES.c.study == study)).mappings().first()
    return Holder(**row) if row else None


@contextlib.contextmanager
def held(engine: sa.Engine, study: str, *,
         heartbeat_s: float = HEARTBEAT_S) -> Iterator[threading.Event]:
    """Hold the lease of ``study`` for the block: a thread renews it every ``heartbeat_s``
    seconds; the event it yields is set if the lease is lost (another driver took it over
    after our heartbeats stopped reaching the database). Released on exit.

    Raises:
        LeaseHeld: see `acquire`.
    """
    lease = acquire(engine, study)
    lost, done = threading.Event(), threading.Event()

    def beat() -> None:
        while not done.wait(heartbeat_s):
            try:
                if not lease.renew():
                    lost.set()
                    return
            except sa.exc.SQLAlchemyError:
                pass  # the driver meets the storage fault itself; keep trying meanwhile

    thread = threading.Thread(target=beat, name=f"lease:{study}", daemon=True)
    thread.start()
    try:
        yield lost
    finally:
        done.set()
        thread.join()
        with contextlib.suppress(sa.exc.SQLAlchemyError):  # unreachable: it goes stale
            lease.release()


def _create_table(engine: sa.Engine) -> None:
    try:
        _META.create_all(engine, checkfirst=True)
    except sa.exc.SQLAlchemyError:
        # two drivers creating it at once: the loser's CREATE fails, the table is there
        if not sa.inspect(engine).has_table(LEASES.name):
            raise


def _me(study: str, now: float) -> dict[str, Any]:
    host, pid = socket.gethostname(), os.getpid()
    return {"study": study, "token": uuid.uuid4().hex, "holder": f"{_user()}@{host} pid {pid}",
            "host": host, "pid": pid, "started": _process_start(pid), "since": now,
            "heartbeat": now}


def _is_dead(h: Holder, now: float, stale_s: float) -> bool:
    if now - h.heartbeat > stale_s:
        return True
    if h.host != socket.gethostname():
        return False  # another machine: only its heartbeat can tell
    if h.pid == os.getpid():
        return False  # this very process holds it (a nested run): refuse, never share
    try:
        os.kill(h.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # alive, another user's
    return bool(h.started) and _process_start(h.pid) != h.started  # pid reused since


def _process_start(pid: int) -> str:
    """When process ``pid`` started, in clock ticks since boot (Linux ``/proc/PID/stat`` field
    22, proc(5)); "" where there is no /proc. Tells a live holder from a reused pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rpartition(")")[2].split()[19]  # fields after "(comm)" start at field 3


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())
