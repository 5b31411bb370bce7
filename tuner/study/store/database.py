"""Where studies are stored: database URLs, opening them (never creating one by looking), SQLite
settings, and the study names a database holds. Imports Optuna and SQLAlchemy, never Ray.

A URL's password is shown masked everywhere (`shown`): it stays in memory. A password is best
not in the URL at all: PostgreSQL's client library reads ``PGPASSWORD`` and ``~/.pgpass`` when
the URL has none (docs/tuning.md, "Credentials").

A sqlite file is created only by `open_storage` (a driver creating a study); every connection
after that opens the file read-write without creating it, so a database deleted while a driver
runs is reported (`StorageFault`), never silently replaced by an empty one.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sqlite3
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import optuna
import sqlalchemy

from tuner.study.specs.urls import URL_PREFIXES, shown

DB_FILE = "study.db"


class StorageError(ValueError):
    """A storage URL is malformed, unusable or unreachable; the message names where it came
    from (``--storage`` or ``study.storage``), the rule and the URL (password hidden)."""


class StorageFault(RuntimeError):
    """The storage failed while a study ran (server down, disk full, read-only, file deleted);
    the message is one line naming the storage (password hidden) and what failed."""


class FileGone:
    """For a sqlite storage: whether its file was deleted or replaced since this was made.
    SQLite connections already open keep writing to a deleted file's inode without an error,
    so the driver looks (`is_set`, a stat, polled as a stop flag) and `check` raises."""

    def __init__(self, url: str) -> None:
        self._path = sqlite_path(url)
        self._url = url
        self._inode = self._path.stat().st_ino if self._path is not None else None

    def is_set(self) -> bool:
        if self._path is None:
            return False
        try:
            return self._path.stat().st_ino != self._inode
        except OSError:
            return True

    def check(self) -> None:
        """Raises `StorageFault` if the file is gone or replaced."""
        if self.is_set():
            raise StorageFault(f"storage {shown(self._url)}: the database file was deleted or "
                               "replaced while the study ran; nothing was recreated, and the "
                               "trials recorded since then are lost with the old file.")


def fault_of(exc: BaseException) -> BaseException | None:
    """The database error behind ``exc`` (its cause chain, Optuna's and Ray Tune's wrappers
    included), or None when the storage had no part in it."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, (sqlalchemy.exc.SQLAlchemyError, sqlite3.Error,
                          optuna.exceptions.StorageInternalError)):
            return e
        e = e.__cause__ or e.__context__
    return None


def describe_fault(url: str, exc: BaseException) -> str:
    """One line: the storage, what failed, the database's own words (first line only)."""
    cause = fault_of(exc) or exc
    inner = getattr(cause, "orig", None) or cause
    first = (str(inner).strip().splitlines() or [""])[0][:300]
    return f"storage {shown(url)}: {type(inner).__name__}: {first}"


def storage_url(run_dir: Path, override: str = "", spec_url: str = "") -> str:
    """``--storage`` beats the spec's ``study.storage``; default: a sqlite file in ``run_dir``."""
    return override or spec_url or f"sqlite:///{(run_dir / DB_FILE).resolve()}"


def check_url(url: str, where: str = "--storage") -> None:
    """Raise `StorageError` unless ``url`` is a database URL moetune can use (before any I/O)."""
    if not url.startswith(URL_PREFIXES):
        raise StorageError(f"{where}: must be a database URL starting with one of "
                           f"{list(URL_PREFIXES)} (e.g. sqlite:////abs/path/study.db, "
                           f"postgresql://user:pw@host/db), but got {shown(url)!r}.")
    try:
        parsed = sqlalchemy.engine.make_url(url)
    except (sqlalchemy.exc.ArgumentError, ValueError) as e:
        # ValueError: e.g. a port that is not a number (make_url calls int() on it)
        raise StorageError(f"{where}: not a valid database URL ({e}): {shown(url)!r}.") from None
    if parsed.port is not None and not 0 < parsed.port < 65536:
        raise StorageError(f"{where}: the port must be in 1..65535, but got {parsed.port} in "
                           f"{shown(url)!r}.")


def open_storage(url: str, where: str = "--storage") -> optuna.storages.RDBStorage:
    """An RDB storage for ``url`` (sqlite waits on a lock instead of failing at once).

    Creates the database (a sqlite file, or the tables) if missing; read-only callers use
    `open_existing_storage`. Raises `StorageError` for an unusable or unreachable URL.
    """
    check_url(url, where)
    kwargs: dict[str, Any] = {}
    path = sqlite_path(url)
    if path is not None:
        kwargs = {"connect_args": {"timeout": 60}}
        _create_sqlite_file(path, where)
    try:
        storage = _rdb_storage(_engine_url(url), kwargs)
    except (sqlalchemy.exc.SQLAlchemyError, ImportError) as e:
        # e.g. server down, wrong password, driver not installed: say so, not a traceback
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise StorageError(f"{where}: cannot open the database {shown(url)!r}: "
                           f"{type(e).__name__}: {first}") from None
    if url.startswith("sqlite"):
        _fast_sqlite(storage)
    return storage


def _rdb_storage(url: str, kwargs: dict[str, Any]) -> optuna.storages.RDBStorage:
    """Optuna's RDBStorage, retried when another process creates the same new database at the
    same moment: both create the tables, so one fails with "table ... already exists" or on
    inserting the schema version row (IntegrityError on alembic_version); a later attempt finds
    the schema in place."""
    attempts = 5
    for attempt in range(attempts):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
        except sqlalchemy.exc.SQLAlchemyError as e:
            if attempt == attempts - 1 or not _creation_race(e):
                raise
            time.sleep(0.1 * (attempt + 1))
    raise AssertionError("unreachable")


def _creation_race(e: sqlalchemy.exc.SQLAlchemyError) -> bool:
    """Whether ``e`` is another process's concurrent creation of the same schema."""
    text = str(e).lower()
    return isinstance(e, sqlalchemy.exc.IntegrityError) or "already exists" in text


def _fast_sqlite(storage: optuna.storages.RDBStorage) -> None:
    """WAL journal + synchronous=NORMAL: a commit survives a killed process (what resume needs)
    and costs no fsync; only a power loss can drop the last commits. ~10x faster per trial."""

    @sqlalchemy.event.listens_for(storage.engine, "connect")
    def _pragmas(dbapi_connection: Any, _record: Any) -> None:
        cur = dbapi_connection.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    storage.engine.dispose()  # reconnect so every pooled connection gets the pragmas


def _create_sqlite_file(path: Path, where: str) -> None:
    """Create an empty sqlite database at ``path`` if none is there (its folder must exist)."""
    if path.is_file():
        return
    try:
        sqlite3.connect(path).close()
    except sqlite3.Error as e:
        raise StorageError(f"{where}: cannot create the database {path}: {e}") from None


def _engine_url(url: str) -> str:
    """The URL SQLAlchemy connects with: a sqlite file is opened read-write and never created
    (SQLite's ``mode=rw`` URI, https://www.sqlite.org/uri.html), so a file deleted under a
    running driver fails loudly instead of reappearing empty."""
    path = sqlite_path(url)
    if path is None:
        return _with_installed_driver(url)
    return f"sqlite:///file:{quote(str(path))}?mode=rw&uri=true"


def _with_installed_driver(url: str) -> str:
    """``postgresql://`` means psycopg 3 to SQLAlchemy 2.1; use psycopg2 when only it is here."""
    if not url.startswith("postgresql://"):
        return url
    if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2"):
        return "postgresql+psycopg2://" + url[len("postgresql://"):]
    return url


def open_existing_storage(url: str, where: str = "--storage") -> optuna.storages.RDBStorage:
    """`open_storage` for read-only commands: never creates a sqlite file, and never writes
    Optuna's tables into a database (sqlite or server) that has none. Raises LookupError if
    there is no study database at ``url``."""
    check_url(url, where)
    path = sqlite_path(url)
    if path is not None:
        if not path.is_file():
            raise LookupError(f"{where}: no database at {path} (nothing was created).")
        if not _has_study_tables(path, where):
            raise LookupError(f"{where}: {path} is not a moetune study database.")
    elif not _server_has_study_tables(url, where):
        raise LookupError(f"{where}: {shown(url)} holds no moetune studies (no tables were "
                          "created).")
    return open_storage(url, where)


def _server_has_study_tables(url: str, where: str) -> bool:
    """Whether a database server's database already has Optuna's tables (read-only look)."""
    try:
        engine = sqlalchemy.create_engine(_with_installed_driver(url))
        try:
            return sqlalchemy.inspect(engine).has_table("studies")
        finally:
            engine.dispose()
    except (sqlalchemy.exc.SQLAlchemyError, ImportError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise StorageError(f"{where}: cannot open the database {shown(url)!r}: "
                           f"{type(e).__name__}: {first}") from None


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL, whatever query the URL carries (``?timeout=30``), else
    None."""
    if not url.startswith("sqlite:///"):
        return None
    return Path(sqlalchemy.engine.make_url(url).database or "")


def _has_study_tables(path: Path, where: str = "--storage") -> bool:
    """Whether the sqlite file has Optuna's tables. Raises `StorageError` for a file SQLite
    cannot read (corrupt, not a database, unreadable): that is not "no study"."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True,
                                                timeout=60)) as con:
            rows = con.execute("SELECT name FROM sqlite_master WHERE name = 'studies'")
            return rows.fetchone() is not None
    except sqlite3.Error as e:
        raise StorageError(f"{where}: {path} cannot be read as a SQLite database "
                           f"({type(e).__name__}: {e}); restore it from a backup, or move it "
                           "away to start over.") from None


def study_names(storage: optuna.storages.BaseStorage) -> list[str]:
    """The studies a database holds (names only: no trial is read)."""
    return [s.study_name for s in storage.get_all_studies()]
