"""Asking a running study to stop, through the storage: whoever drives the study (a terminal, a
service's Ray actor, another machine) sees the request, because the storage is the truth.

    >>> request_stop(study, by="alice")          # doctest: +SKIP
    >>> run_study(spec, ..., stop=StorageStopFlag(study))  # doctest: +SKIP

A stopped study's in-flight trials end as ``interrupted`` and are queued again, so ``resume``
(which clears the request) re-runs exactly them.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import optuna

from tuner.study.store import records


def request_stop(study: optuna.Study, *, by: str) -> None:
    """Record that ``by`` asked the study's driver to stop."""
    study.set_user_attr(records.STOP, {"by": by, "at": _now()})


def clear_stop(study: optuna.Study) -> None:
    """Forget a stop request (a resumed study runs again)."""
    if study.user_attrs.get(records.STOP):
        study.set_user_attr(records.STOP, None)


def stop_requested(study: optuna.Study) -> dict[str, Any] | None:
    """Who asked the study to stop and when, or None."""
    value = study.user_attrs.get(records.STOP)
    return dict(value) if value else None


class StorageStopFlag:
    """`run_study`'s ``stop``: set once the study's STOP attribute is, read at most every
    ``poll_s`` seconds (Ray Tune asks after every reported result)."""

    def __init__(self, study: optuna.Study, *, poll_s: float = 1.0) -> None:
        self._study = study
        self._poll_s = poll_s
        self._checked = -float("inf")
        self._set = False

    def is_set(self) -> bool:
        now = time.monotonic()
        if not self._set and now - self._checked >= self._poll_s:
            self._checked = now
            self._set = bool(self._study.user_attrs.get(records.STOP))  # read from storage
        return self._set


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
