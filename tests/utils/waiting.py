"""Waiting in tests on a condition, never on a fixed time: `wait_until` polls a predicate and
returns its first truthy value; past ``timeout`` (a hang guard, never a speed requirement) or as
soon as ``gone`` says why it never will be (a process ended), it fails naming what it waited
for. The only ``time.sleep`` a test's waiting needs lives here."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
POLL_S = 0.05


class WaitTimeout(AssertionError):
    """The condition did not hold in time, or never could (``gone``)."""


def wait_until(predicate: Callable[[], T], *, what: str, timeout: float = 120.0,
               gone: Callable[[], str | None] | None = None, poll_s: float = POLL_S) -> T:
    """``predicate()``'s first truthy value, asked every ``poll_s`` seconds.

    Raises:
        WaitTimeout: ``"not within {timeout} s: {what}"``, or ``"{why}, before: {what}"`` when
            ``gone`` returns a reason.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        why = gone() if gone is not None else None
        if why:
            raise WaitTimeout(f"{why}, before: {what}")
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"not within {timeout:g} s: {what}")
        time.sleep(poll_s)


def ended(proc: object, name: str = "the process") -> Callable[[], str | None]:
    """A ``gone`` for a `subprocess.Popen`: why waiting on it is over once it has exited."""
    def why() -> str | None:
        rc = proc.poll()  # type: ignore[attr-defined]
        return None if rc is None else f"{name} ended (rc {rc})"
    return why
