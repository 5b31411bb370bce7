"""The application's one error type for bad input, and how a stop signal ends a command."""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any


class UsageError(ValueError):
    """Bad command-line input: reported on stderr, exit status 2, nothing written."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread is (as Ctrl-C raises KeyboardInterrupt), so a
    driver stops the same clean way: in-flight trials recorded as interrupted, lease released,
    Ray shut down."""

    signum = signal.SIGTERM


_received: list[int] = []  # SIGTERM, once received


def catch_sigterm() -> Any:
    """Turn SIGTERM into `Terminated` (from the main thread only; Python's rule for handlers);
    returns the handler it replaced, for the caller to put back."""

    def handler(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one clean stop; do not cut it short
        _received.append(signum)
        raise Terminated()

    _received.clear()
    return signal.signal(signal.SIGTERM, handler)


class DeferredStop:
    """SIGINT and SIGTERM while a driver runs: the first is recorded (`is_set`) and the runner
    stops at its next safe point (between Ray Tune's steps, never inside a storage write, so
    no trial is left RUNNING); a second one raises at once. Use as a context manager around
    `run_study`, passed as its ``interrupt``."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._before: dict[int, Any] = {}

    def is_set(self) -> bool:
        return bool(self.received)

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if not self.received:
            self.received.append(signum)
            return
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()

    def __enter__(self) -> DeferredStop:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._before[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._before.items():
            signal.signal(sig, handler)

    def exit_code(self) -> int:
        """128 + the first signal's number: 130 for Ctrl-C, 143 for SIGTERM."""
        return 128 + int(self.received[0] if self.received else signal.SIGINT)


def interrupted_exit_code(e: KeyboardInterrupt) -> int:
    """128 + the signal's number, the shell's convention: 130 for Ctrl-C, 143 for SIGTERM.

    Ray's blocking calls re-raise an exception from a signal handler as a plain
    KeyboardInterrupt, so a SIGTERM is also known from the handler's own record."""
    signum = getattr(e, "signum", None) or (_received[0] if _received else signal.SIGINT)
    return 128 + int(signum)
