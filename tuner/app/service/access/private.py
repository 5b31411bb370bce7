"""The service's files are its user's alone: the root 0700, every file it creates 0600.

`make_private` runs at the start of ``moetune serve`` and ``moetune token``: it sets the
process' umask to 077 (so the database, its ``-wal``/``-shm`` files, run folders, reports and
the files of a local Ray started by the service, whose processes inherit the umask, are created
private), makes the root 0700 and tightens a SQLite database already there to 0600.

`csrf_key` is the key that signs the forms' CSRF tokens: 32 random bytes in ``ROOT/csrf.key``
(0600), made once. It is not in the database, so reading the database does not let anyone
forge a form. `local_token` makes the token a service without access tokens asks of its one
local user. The local Ray's authentication token is made the same way (`secret_file`,
``ROOT/ray.token``; `tuner.app.serve_command`), and its temp dir, where Ray keeps its sockets
and logs in folders of mode 0777, lies in a 0700 folder (`ray_temp_dir`).
"""

from __future__ import annotations

import os
import secrets
import stat
import tempfile
from pathlib import Path

# What the service keeps in its root, named once here, where it is made: a study (a folder
# ROOT/<name>) may take none of these names (`reserved_name`)
SERVICE_DB = "service.db"  # the default database (`moetune serve`, `moetune token`)
KEY_FILE = "csrf.key"
RAY_TOKEN_FILE = "ray.token"  # the local Ray's token (`tuner.app.serve_command`)
_SQLITE_SUFFIXES = ("", "-wal", "-shm", "-journal")  # and "-mj<hex>" super-journals
RAY_TEMP = ".ray"  # the local Ray's temp dir, when its socket paths fit (`ray_temp_dir`)
LOCAL_TOKEN_FILE = "local.token"  # the local user's token, new at each start (`local_token`)
ROOT_FILES = (KEY_FILE, RAY_TOKEN_FILE, RAY_TEMP, LOCAL_TOKEN_FILE)
# AF_UNIX socket paths hold 107 bytes on Linux (Ray checks: `validate_socket_filepath` in
# ray/_private/utils.py, Ray 2.60.0); Ray puts its sockets at
# <temp dir>/session_<date>_<time>_<microseconds>_<pid>/sockets/<name>[.<n>]
_AF_UNIX_MAX = 107
_RAY_SOCKET_TAIL = len("/r/session_2026-12-03_16-16-36_123456_4194304/sockets/plasma_store.99")


def make_private(root: Path, sqlite_db: Path | None) -> None:
    """umask 077 for this process, ``root`` (created if missing) 0700, and ``sqlite_db`` with
    its side files 0600 where they exist."""
    os.umask(0o077)
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o700)
    if sqlite_db is not None:
        for suffix in _SQLITE_SUFFIXES:
            path = sqlite_db.with_name(sqlite_db.name + suffix)
            if path.exists():
                path.chmod(0o600)


def csrf_key(root: Path) -> bytes:
    """The CSRF key in ``root/csrf.key``, created 0600 on first use."""
    return secret_file(root / KEY_FILE)


def secret_file(path: Path) -> bytes:
    """32 random bytes kept as hex in ``path`` (0600), made on first use; a file another user
    can read is made 0600 again."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        if stat.S_IMODE(path.stat().st_mode) & 0o077:
            path.chmod(0o600)
        try:
            key = bytes.fromhex(path.read_text().strip())
        except ValueError:
            key = b""
        if len(key) < 32:
            raise ValueError(f"{path}: must hold 32 bytes as hex, but holds something else; "
                             "delete it to make a new one.") from None
        return key
    key = secrets.token_bytes(32)
    with os.fdopen(fd, "w") as f:
        f.write(key.hex())
    return key


def local_token(root: Path) -> str:
    """A new token for the local user of a service without access tokens, written to
    ``root/local.token`` (0600, in the 0700 root: only the user who started the service reads
    it), replacing the last start's; the service serves the local user to requests that carry
    it (`auth.Auth`), as Jupyter serves whoever shows the token it printed at start."""
    path = root / LOCAL_TOKEN_FILE
    path.unlink(missing_ok=True)  # a file someone else made there is not written through
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


def reserved_name(name: str, root: Path, sqlite_db: Path | None) -> str | None:
    """What ``root/name`` would collide with, or None when a study may be named ``name``.

    A study's run folder is ``root/name``; one named after a file the service or SQLite keeps
    in the root takes that file's place: SQLite cannot then create ``service.db-journal`` and
    fails every connection ("disk I/O error": no token can be revoked, no driver start, no
    restart). Reserved: `ROOT_FILES`, and every name beginning with the database's file name
    (`SERVICE_DB` always, since a later start without ``--storage`` uses it, and a SQLite
    ``sqlite_db`` of the service's when it lies in ``root``), which covers SQLite's side
    files: ``-journal``, ``-wal``, ``-shm`` and ``-mj<hex>`` super-journals.
    """
    if name in ROOT_FILES:
        return f"the service's file {name!r}"
    databases = {SERVICE_DB}
    if sqlite_db is not None and sqlite_db.resolve().parent == root.resolve():
        databases.add(sqlite_db.name)
    for db in sorted(databases):
        if name.startswith(db):
            return f"the database's files ({db!r} and its SQLite side files, {db}-journal, " \
                   f"{db}-wal, {db}-shm)"
    return None


def ray_temp_dir(root: Path) -> tuple[Path, Path | None]:
    """The local Ray's temp dir (Ray's ``_temp_dir``), inside a folder of this user's alone;
    and that folder when it is a fallback outside ``root``, for the service to remove when it
    stops (else None).

    Ray makes its temp dir and the session folders in it (``session_*/``, ``sockets/``,
    ``logs/``) 0777 without the sticky bit (``try_to_create_directory`` in
    ray/_common/utils.py, Ray 2.60.0). Its temp dir is therefore ``r`` inside a 0700 folder,
    through which no other user can reach them (rename a socket, read a log): ``root/.ray``
    when Ray's socket paths under it fit AF_UNIX's 107 bytes, else a new folder made by
    `tempfile.mkdtemp` (0700, in ``$TMPDIR``, or ``/tmp`` when that is too long too).
    """
    mine = root / RAY_TEMP
    if len(os.fsencode(mine.resolve())) + _RAY_SOCKET_TAIL <= _AF_UNIX_MAX:
        mine.mkdir(mode=0o700, exist_ok=True)
        mine.chmod(0o700)
        return mine / "r", None
    for where in (None, "/tmp"):
        short = Path(tempfile.mkdtemp(prefix="moetune-ray-", dir=where))  # 0700, ours alone
        if len(os.fsencode(short)) + _RAY_SOCKET_TAIL <= _AF_UNIX_MAX:
            return short / "r", short
        short.rmdir()
    raise ValueError(f"TMPDIR: must be a folder whose path leaves Ray's socket paths under "
                     f"{_AF_UNIX_MAX} bytes, but got {tempfile.gettempdir()!r} (and /tmp).")
