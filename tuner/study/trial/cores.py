"""The machine's cores as a reader–writer lock: training steps share them, a timing has them alone.

Every training step of every trial on a machine (any study, any driver, any user) holds the lock
*shared* for the step's computation (`trainers.train`'s ``step_gate``); a timing probe
(`tuner.study.trial.timing`) holds it *exclusive*, so the running trials pause at their next step
boundary while it times, and it starts only once the steps in flight have ended.

Two files in the temp dir, each locked with ``flock(2)`` (the kernel drops a dead process'
locks, so a killed trial or probe never leaves the machine locked):

- ``moetune-cores.lock``: shared by steps, exclusive for a probe.
- ``moetune-cores.turnstile``: a step passes through it (takes it exclusive, then the main lock
  shared, then lets it go); a probe holds it from before it asks for the main lock until it is
  done. Without it, steps that overlap one another would keep the main lock shared forever and
  a probe would wait without end (writer starvation, as with any read-preferring lock:
  Courtois, Heymans and Parnas, "Concurrent control with readers and writers", CACM 14(10),
  1971); with it, a waiting probe stops new steps from starting. Two probes queue on it too.

Cost per step: two opens and a few ``flock`` calls (microseconds, against steps of tens of
milliseconds). ``MOETUNE_CORES_LOCK`` moves the files (a path without the suffix); where
``fcntl`` does not exist (Windows) the lock is a no-op and timings are not exclusive.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

ENV = "MOETUNE_CORES_LOCK"
DEFAULT_NAME = "moetune-cores"


@dataclass(frozen=True)
class CoreLock:
    """The reader–writer lock at ``base`` (``base.lock`` and ``base.turnstile``)."""

    base: Path

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        """Held around one training step: waits while a probe holds or waits for the cores."""
        with _flocked(self._turnstile, exclusive=True):
            main = _open(self._main)
            try:
                _flock(main, exclusive=False)
            except BaseException:
                os.close(main)
                raise
        try:
            yield
        finally:
            os.close(main)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Held by a timing probe: no step starts, and it waits for the steps in flight."""
        with _flocked(self._turnstile, exclusive=True), _flocked(self._main, exclusive=True):
            yield

    @property
    def _main(self) -> Path:
        return self.base.with_name(self.base.name + ".lock")

    @property
    def _turnstile(self) -> Path:
        return self.base.with_name(self.base.name + ".turnstile")


def machine_lock() -> CoreLock:
    """The lock every moetune process on this machine uses (``$MOETUNE_CORES_LOCK``, else
    ``moetune-cores`` in the temp dir)."""
    return CoreLock(Path(os.environ.get(ENV) or Path(tempfile.gettempdir()) / DEFAULT_NAME))


def gate_for(trainer: Callable[..., Any]) -> dict[str, Any]:
    """``{"step_gate": ...}`` to pass to ``trainer`` so its steps share the machine's cores with
    a timing probe (every training moetune runs: trials, noise re-runs, validate, rerun); ``{}``
    for a trainer written before `trainers.train` took ``step_gate`` (it still runs, ungated)."""
    return {"step_gate": machine_lock().shared} if takes(trainer, "step_gate") else {}


def takes(fn: Callable[..., Any], name: str) -> bool:
    """Whether ``fn`` accepts keyword ``name``."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is p.VAR_KEYWORD for p in params)


@contextlib.contextmanager
def _flocked(path: Path, *, exclusive: bool) -> Iterator[None]:
    fd = _open(path)
    try:
        _flock(fd, exclusive=exclusive)
        yield
    finally:
        os.close(fd)  # closing the last descriptor of the open file drops its lock


def _open(path: Path) -> int:
    """Read-only is enough for flock; another user's file in a sticky /tmp can be opened that
    way, where O_CREAT on it would be refused (fs.protected_regular)."""
    try:
        return os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return os.open(path, os.O_RDONLY | os.O_CREAT, 0o666)


def _flock(fd: int, *, exclusive: bool) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
