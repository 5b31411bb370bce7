"""One driver per study: the lease in the study's database (SQLite and PostgreSQL)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid

import pytest
import sqlalchemy as sa

from tuner.study.store import database as db
from tuner.study.store import lease as ls


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request, tmp_path):
    if request.param == "sqlite":
        return db.open_storage(db.storage_url(tmp_path)).engine
    return db.open_storage(request.getfixturevalue("private_postgres").url).engine


def _study() -> str:
    return f"s-{uuid.uuid4().hex[:8]}"


def _plant(engine, study: str, **row) -> None:
    """A lease row as another driver would have left it."""
    ls.acquire(engine, study).release()  # creates the table
    values = {"study": study, "token": "other", "holder": "bob@elsewhere pid 7",
              "host": "elsewhere", "pid": 7, "started": "", "since": time.time(),
              "heartbeat": time.time(), **row}
    with engine.begin() as con:
        con.execute(sa.insert(ls.LEASES).values(**values))


def test_a_held_lease_is_refused_naming_the_holder(engine):
    study = _study()
    lease = ls.acquire(engine, study)
    with pytest.raises(ls.LeaseHeld, match=rf"pid {os.getpid()} since \d{{4}}-\d\d-\d\d"):
        ls.acquire(engine, study)  # the same process too: never shared
    lease.release()
    ls.acquire(engine, study).release()  # free again


def test_a_stale_lease_of_another_host_is_taken_over(engine):
    study = _study()
    _plant(engine, study, heartbeat=time.time() - 10 * ls.STALE_S)
    lease = ls.acquire(engine, study)
    assert ls.holder(engine, study).token == lease.token
    assert lease.renew()


def test_a_fresh_lease_of_another_host_is_respected(engine):
    study = _study()
    _plant(engine, study)
    with pytest.raises(ls.LeaseHeld, match="bob@elsewhere pid 7"):
        ls.acquire(engine, study)
    with pytest.raises(ls.LeaseHeld):
        ls.check_free(engine, study)


def test_a_dead_process_on_this_host_loses_its_lease_at_once(engine):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    study = _study()
    _plant(engine, study, host=socket.gethostname(), pid=dead.pid)
    ls.check_free(engine, study)
    ls.acquire(engine, study).release()


def test_a_lease_taken_over_is_known_lost_to_its_old_holder(engine):
    study = _study()
    old = ls.acquire(engine, study, now=time.time() - 10 * ls.STALE_S)
    new = ls.acquire(engine, study)
    assert not old.renew() and new.renew()
