"""A real `moetune serve` process for the service tests, and a small HTTP client for it.

A plain module (not conftest.py), imported by the service tests."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from service_spec import SPEC, StudyWaits  # noqa: F401 - the tests import SPEC from here

STARTED = re.compile(rb"moetune service on http://[^/]*:(\d+)/")


class Server(StudyWaits):
    """``moetune serve`` in a subprocess on a free loopback port.

    Each start passes ``--port 0`` and reads the port from the service's start line: the
    service binds it before its Ray starts, so no other process can hold it (a port picked
    here and passed in could be taken by another test's Ray before the service bound it, and
    the client then talked to a gRPC server)."""

    def __init__(self, root: Path, *, trainer: str = "tuner.testing:slow_train",
                 extra: tuple[str, ...] = ()) -> None:
        self.root = root
        self.port = 0
        self.url = ""
        self.log = root.parent / f"serve-{root.name}-{uuid.uuid4().hex[:8]}.log"
        self._cmd = [sys.executable, "-m", "tuner", "serve", "--root", str(root), "--port",
                     "0", "--trainer", trainer, *extra]
        self.proc: subprocess.Popen[bytes] | None = None
        self.local_token = ""  # ROOT/local.token, new at each start (`private.local_token`)

    def start(self, timeout_s: float = 120.0) -> Server:
        begin = self.log.stat().st_size if self.log.exists() else 0
        self.proc = subprocess.Popen(self._cmd, stdout=self.log.open("ab"),
                                     stderr=subprocess.STDOUT, env={**os.environ},
                                     start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited {self.proc.returncode}: "
                                   f"{self.log.read_text()[-2000:]}")
            with self.log.open("rb") as f:
                f.seek(begin)
                started = STARTED.search(f.read())
            if started:
                self.port = int(started.group(1))
                token_file = self.root / "local.token"
                self.local_token = (token_file.read_text().strip() if token_file.is_file()
                                    else "")
                self.url = f"http://127.0.0.1:{self.port}"
                try:
                    urllib.request.urlopen(self.url + "/openapi.json", timeout=2).close()
                    return self
                except urllib.error.HTTPError:
                    return self  # it answered: a 401 once a token exists
                except (urllib.error.URLError, OSError):
                    pass
            time.sleep(0.5)
        raise RuntimeError(f"serve did not answer in {timeout_s} s: {self.log.read_text()}")

    def kill(self) -> None:
        """SIGKILL the whole process group (the service and the Ray it started)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()
        self.kill()

    def call(self, method: str, path: str, body: Any = None, *, token: str | None = None,
             headers: dict[str, str] | None = None, raw: bytes | None = None
             ) -> tuple[int, Any]:
        """(status, decoded JSON or text) of one request; ``token`` None: the service's local
        token (its starting user's, while no access token exists), "": none."""
        token = self.local_token if token is None else token
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None
                                            else None)
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        if token and not (headers or {}).get("Cookie"):
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, _decode(r.read(), r.headers.get("content-type", ""))
        except urllib.error.HTTPError as e:
            return e.code, _decode(e.read(), e.headers.get("content-type", ""))



def _decode(raw: bytes, content_type: str) -> Any:
    if "json" in content_type:
        return json.loads(raw or b"null")
    return raw.decode(errors="replace")
