"""A PostgreSQL server of the tests' own (its own data folder, port and password), which a test
may stop, restart or search through without touching the shared server other tests use."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

CANARY = "Canary-S3cret-4f1d9"  # the password: no file, attribute or output may contain it


@dataclass
class PrivatePostgres:
    url: str  # postgresql://moetune_canary:CANARY@127.0.0.1:PORT/postgres
    data: Path
    pg_ctl: str

    def ctl(self, *args: str) -> None:
        subprocess.run(["su", "postgres", "-c", " ".join([self.pg_ctl, "-D", str(self.data),
                                                            "-w", *args])],
                       check=True, capture_output=True, timeout=120)

    def stop(self) -> None:
        self.ctl("-m", "fast", "stop")

    def start(self) -> None:
        self.ctl("-l", str(self.data / "server.log"), "start")


@pytest.fixture(scope="session")
def private_postgres() -> Iterator[PrivatePostgres]:
    bins = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if os.geteuid() != 0 or not bins or shutil.which("su") is None:
        pytest.skip("a private PostgreSQL server needs root and the server binaries "
                    "(/usr/lib/postgresql/*/bin; CI installs them and runs as root)")
    pytest.importorskip("psycopg2", reason="psycopg2 is not installed")
    bindir = bins[-1].parent
    base = Path(tempfile.mkdtemp(prefix="moetune-pg-"))
    data, pwfile = base / "data", base / "pw"
    pwfile.write_text(CANARY + "\n")
    shutil.chown(base, "postgres")
    shutil.chown(pwfile, "postgres")
    port = _free_port()
    subprocess.run(["su", "postgres", "-c", f"{bindir}/initdb -D {data} -U moetune_canary "
                    f"--pwfile={pwfile} --auth=scram-sha-256"], check=True,
                   capture_output=True, timeout=300)
    pwfile.unlink()
    with (data / "postgresql.conf").open("a") as f:
        f.write(f"port = {port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{base}'\n")
    pg = PrivatePostgres(url=f"postgresql://moetune_canary:{CANARY}@127.0.0.1:{port}/postgres",
                         data=data, pg_ctl=str(bindir / "pg_ctl"))
    pg.start()
    try:
        yield pg
    finally:
        with contextlib.suppress(subprocess.SubprocessError):
            pg.stop()
        shutil.rmtree(base, ignore_errors=True)


def _free_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
