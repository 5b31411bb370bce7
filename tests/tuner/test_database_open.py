"""Opening one new database from several processes at once: every opener gets a working storage.

Two processes that create the same new database both create its tables; the second to insert
Optuna's schema version row then fails with IntegrityError (seen as a flaky cancel-while-starting
test). `open_storage` retries that case."""

from __future__ import annotations

import multiprocessing as mp

import optuna
import pytest
import sqlalchemy

from tuner.study.store import database


def _open(url: str, barrier, out) -> None:
    barrier.wait()
    try:
        database.open_storage(url).get_all_studies()
        out.put("ok")
    except Exception as e:  # noqa: BLE001 - reported to the test
        out.put(f"{type(e).__name__}: {e}")


def test_processes_opening_a_new_database_together_all_succeed(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    ctx = mp.get_context("spawn")
    n = 6
    barrier, out = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_open, args=(url, barrier, out)) for _ in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert sorted(out.get(timeout=5) for _ in range(n)) == ["ok"] * n


def test_an_integrity_error_on_the_version_row_is_retried(tmp_path, monkeypatch):
    real, calls = optuna.storages.RDBStorage, []

    def racing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:  # the other process stamped the version first
            raise sqlalchemy.exc.IntegrityError("INSERT INTO alembic_version", {}, Exception())
        return real(*args, **kwargs)

    monkeypatch.setattr(optuna.storages, "RDBStorage", racing)
    storage = database.open_storage(f"sqlite:///{tmp_path / 'study.db'}")
    assert len(calls) == 2 and storage.get_all_studies() == []


def test_a_persistent_integrity_error_is_reported_not_retried_forever(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise sqlalchemy.exc.IntegrityError("INSERT INTO alembic_version", {}, Exception())

    monkeypatch.setattr(optuna.storages, "RDBStorage", broken)
    with pytest.raises(database.StorageError, match="cannot open the database"):
        database.open_storage(f"sqlite:///{tmp_path / 'study.db'}")
