"""The local Ray of `moetune serve` ends with it, however it ends (``kill -9`` included).

``ray.init`` starts the GCS and the raylet with ``PR_SET_PDEATHSIG`` (they die with the
service), but the processes the raylet starts do not: its dashboard agent and runtime-env
agent notice their raylet gone within 2 s, then report its death to the GCS, which is gone
too, and wait on it for the GCS client's reconnect timeout, about 60 s with Ray 2.60
(``ray/_private/process_watcher.py``: ``_check_parent`` → ``report_raylet_error_logs``), one
of them listening on loopback meanwhile.

So `serve` starts this reaper before its Ray: a small process that reads its stdin, a pipe
only the service holds open. At end of file (the service ended, in any way) it SIGKILLs every
process of this user holding a file open under the Ray's temp folder, which is the service's
alone (``ROOT/.ray/r``, or a fallback made for it: `private.ray_temp_dir`) and where every
process of its Ray keeps its logs open (the GCS, the raylet, its agents, every worker and what
a worker started); it waits until they are gone, removes the fallback folder when given one,
and exits. (A process' environment cannot tell: Ray's agents and workers rename themselves with
setproctitle, which can overwrite what ``/proc/PID/environ`` shows.) It reads ``/proc``, so it
acts on Linux only; elsewhere it exits at the service's end and kills nothing.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

GONE_WAIT_S = 10.0  # a SIGKILLed process is gone at once; this bounds a wait on a stuck one


def start_reaper(ray_temp: Path, *, remove: Path | None = None) -> subprocess.Popen[bytes]:
    """The reaper of the Ray whose temp folder is ``ray_temp`` (``remove``: a folder to delete
    after); keep the returned process for the service's lifetime (its stdin is the pipe whose
    end starts the reaping)."""
    cmd = [sys.executable, "-m", __name__, str(ray_temp), *([str(remove)] if remove else [])]
    # no other process gets the pipe's write end: it is not inheritable, and Ray's processes
    # are started with close_fds
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def holding(folder: Path) -> list[int]:
    """The pids of this user's live processes with a file open under ``folder``."""
    prefix, found = f"{folder.resolve()}{os.sep}", []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if entry.stat().st_uid != os.getuid() or _zombie(entry):
                continue
            if any(_target(fd).startswith(prefix) for fd in (entry / "fd").iterdir()):
                found.append(int(entry.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def _target(fd: Path) -> str:
    try:
        return os.readlink(fd)
    except OSError:  # closed meanwhile
        return ""


def _zombie(entry: Path) -> bool:
    """Dead and waiting for its parent to collect it (state Z in /proc/PID/stat)."""
    stat = (entry / "stat").read_text()
    return stat[stat.rindex(")") + 2:].startswith(("Z", "X"))


def reap(ray_temp: Path) -> None:
    """SIGKILL every process holding a file under ``ray_temp`` until none is left (or
    `GONE_WAIT_S`)."""
    deadline = time.monotonic() + GONE_WAIT_S
    while (pids := holding(ray_temp)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:  # gone meanwhile
                continue
        time.sleep(0.05)


def main(argv: list[str]) -> int:
    # the terminal's Ctrl-C reaches the service's whole process group: the reaper waits for
    # the service's end instead of ending before it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    ray_temp, remove = Path(argv[0]), (Path(argv[1]) if len(argv) > 1 else None)
    while sys.stdin.buffer.read(4096):  # the service writes nothing: this waits for its end
        pass
    reap(ray_temp)
    if remove is not None:
        shutil.rmtree(remove, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
