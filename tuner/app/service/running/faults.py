"""When the storage does not answer: how the service tells, and what it answers.

A database that is down, unreachable or out of disk shows as one of `STORAGE_ERRORS`
(SQLAlchemy raises them for SQLite and PostgreSQL alike; Optuna wraps some in its own); a full
disk under the root as an `OSError` (`disk_full`). The API answers both with a 503 whose JSON
says so (``Retry-After``), never with the URL or a traceback; a driver that meets one ends
(`driver.run_driver`), and the scheduler marks its study ``failed: storage unreachable`` once
the storage answers again (`scheduler.Scheduler`).
"""

from __future__ import annotations

import errno

import optuna
import sqlalchemy.exc

STORAGE_ERRORS: tuple[type[Exception], ...] = (
    sqlalchemy.exc.OperationalError,  # connection refused or lost, "database or disk is full"
    sqlalchemy.exc.InterfaceError,
    sqlalchemy.exc.TimeoutError,  # no connection free in the pool in time
    optuna.exceptions.StorageInternalError,
)
RETRY_AFTER_S = 5


def storage_down(error: BaseException) -> bool:
    """Whether ``error``, or an error it was raised from, says the storage does not answer (or
    the disk is full)."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        if isinstance(e, STORAGE_ERRORS) or disk_full(e):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def disk_full(error: BaseException) -> bool:
    """An OS error saying the disk (or the user's quota) is full."""
    return isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT)


def storage_error_detail(error: BaseException) -> str:
    """What a 503 says: the kind of failure, never the URL or the driver's message."""
    if disk_full(error):
        return ("storage: the service's disk is full; nothing was changed; try again once "
                "space is freed.")
    return (f"storage: the study database does not answer ({type(error).__name__}); nothing "
            f"was changed; try again in {RETRY_AFTER_S} s.")
