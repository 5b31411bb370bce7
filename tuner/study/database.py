"""Where studies are stored: database URLs, opening them (never creating one by looking), SQLite
settings, and the study names a database holds. Imports Optuna and SQLAlchemy, never Ray.

A URL's password is shown masked everywhere (`shown`): it stays in memory.
"""

from __future__ import annotations

import contextlib
import importlib.util
import re
import sqlite3
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy

DB_FILE = "study.db"
# The URL schemes a study may live in (the spec's ``study.storage`` and ``--storage``).
URL_PREFIXES = ("sqlite:///", "postgresql", "mysql")


class StorageError(ValueError):
    """A storage URL is malformed, unusable or unreachable; the message names where it came
    from (``--storage`` or ``study.storage``), the rule and the URL (password hidden)."""


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
        sqlalchemy.engine.make_url(url)
    except sqlalchemy.exc.ArgumentError as e:
        raise StorageError(f"{where}: not a valid database URL ({e}): {shown(url)!r}.") from None


def shown(url: str) -> str:
    """``url`` with its password masked (``***``): what messages, files and stored attributes
    get. A URL SQLAlchemy cannot parse is masked by pattern, so it cannot leak either."""
    try:
        return sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)
    except (sqlalchemy.exc.ArgumentError, ValueError):
        return re.sub(r"(://[^/:@]*:)[^@/]*@", r"\1***@", url)


def open_storage(url: str, where: str = "--storage") -> optuna.storages.BaseStorage:
    """An RDB storage for ``url`` (sqlite waits on a lock instead of failing at once).

    Creates the database (a sqlite file, or the tables) if missing; read-only callers use
    `open_existing_storage`. Raises `StorageError` for an unusable or unreachable URL.
    """
    check_url(url, where)
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        kwargs = {"connect_args": {"timeout": 60}}
    try:
        storage = optuna.storages.RDBStorage(_with_installed_driver(url), engine_kwargs=kwargs)
    except (sqlalchemy.exc.SQLAlchemyError, ImportError) as e:
        # e.g. server down, wrong password, driver not installed: say so, not a traceback
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise StorageError(f"{where}: cannot open the database {shown(url)!r}: "
                           f"{type(e).__name__}: {first}") from None
    if url.startswith("sqlite"):
        _fast_sqlite(storage)
    return storage


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


def _with_installed_driver(url: str) -> str:
    """``postgresql://`` means psycopg 3 to SQLAlchemy 2.1; use psycopg2 when only it is here."""
    if not url.startswith("postgresql://"):
        return url
    if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2"):
        return "postgresql+psycopg2://" + url[len("postgresql://"):]
    return url


def open_existing_storage(url: str, where: str = "--storage") -> optuna.storages.BaseStorage:
    """`open_storage` for read-only commands: never creates a sqlite file, and never writes
    Optuna's tables into a database (sqlite or server) that has none. Raises LookupError if
    there is no study database at ``url``."""
    check_url(url, where)
    path = _sqlite_path(url)
    if path is not None:
        if not path.is_file():
            raise LookupError(f"{where}: no database at {path} (nothing was created).")
        if not _has_study_tables(path):
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


def _sqlite_path(url: str) -> Path | None:
    if not url.startswith("sqlite:///"):
        return None
    return Path(sqlalchemy.engine.make_url(url).database or "")


def _has_study_tables(path: Path) -> bool:
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True,
                                                timeout=60)) as con:
            rows = con.execute("SELECT name FROM sqlite_master WHERE name = 'studies'")
            return rows.fetchone() is not None
    except sqlite3.DatabaseError:
        return False


def study_names(storage: optuna.storages.BaseStorage) -> list[str]:
    return [s.study_name for s in optuna.get_all_study_summaries(storage)]
