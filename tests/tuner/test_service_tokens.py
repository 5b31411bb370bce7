"""Tokens, sessions and the CSRF key without a server: revocation, sessions checked against the
database, the service never falling back to open, changes from another origin refused, and the
files private. A fake clock stands in for time."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi import HTTPException, Request

from tuner.app.service.access.auth import CACHE_S, COOKIE, CSRF_HEADER, LOCAL, SESSION_S, Auth
from tuner.app.service.access.private import csrf_key, make_private, ray_temp_dir
from tuner.app.service.access.tokens import MAX_SESSIONS_PER_TOKEN, TokenStore, digest

KEY = b"k" * 32
HOST = "127.0.0.1:8470"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def request(*, method: str = "GET", path: str = "/api/v1/studies", token: str = "",
            cookie: str = "", host: str = HOST, **headers: str) -> Request:
    raw = [(b"host", host.encode())]
    if token:
        raw.append((b"authorization", f"Bearer {token}".encode()))
    if cookie:
        raw.append((b"cookie", f"{COOKIE}={cookie}".encode()))
    raw += [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
    return Request({"type": "http", "method": method, "path": path, "headers": raw,
                    "query_string": b""})


def status(auth: Auth, req: Request) -> int | str:
    try:
        return auth.user(req).name
    except HTTPException as e:
        return e.status_code


@pytest.fixture
def store(tmp_path):
    return TokenStore(sa.create_engine(f"sqlite:///{tmp_path / 'service.db'}"))


def test_revoking_the_last_token_leaves_the_service_closed(store):
    clock = Clock()
    auth = Auth(store, KEY, clock=clock)
    assert auth.user(request()) == LOCAL  # never had a token: the loopback user
    alice = store.create("alice")
    clock.now += CACHE_S
    assert status(auth, request(token=alice)) == "alice"
    assert store.revoke("alice") == 1
    assert status(auth, request(token=alice)) == "alice"  # cached within CACHE_S...
    clock.now += CACHE_S
    assert status(auth, request(token=alice)) == 401  # ...then refused
    assert status(auth, request()) == 401  # no token: not the local admin
    assert status(auth, request(method="POST")) == 401
    fresh = Auth(store, KEY, clock=Clock())  # a restarted service reads the same
    assert status(fresh, request()) == 401
    with pytest.raises(ValueError, match="has none"):
        store.revoke("alice")


def test_beyond_loopback_never_serves_the_local_user(store):
    auth = Auth(store, KEY, open_allowed=False, clock=Clock())
    assert status(auth, request()) == 401  # no token exists, yet no way in


def test_an_open_loopback_service_answers_loopback_names_only(store):
    auth = Auth(store, KEY, clock=Clock())
    assert status(auth, request(host="localhost:8470")) == "local"
    assert status(auth, request(host="[::1]:8470")) == "local"
    assert status(auth, request(host="evil.example:8470")) == 403  # DNS rebinding
    assert status(auth, request(host="127.8.9.10")) == "local"  # all of 127.0.0.0/8


@pytest.mark.parametrize("host", ["127.attacker.example:8470", "127.0.0.1.nip.io:8470",
                                  "127.0.0.1.evil.example", "localhost.evil.example:8470",
                                  "127.0.0.256:8470", "[::2]:8470", "0.0.0.0:8470", "",
                                  "evil.com@127.0.0.1", "127.0.0.1#.evil.com", "[::1]evil",
                                  "127.0.0.1:abc", "127.0.0.1:99999", "127.0.0.1/x",
                                  "127.0.0.1?x", "127.0.0.1 "])
def test_a_name_that_only_looks_like_loopback_is_refused(store, host):
    auth = Auth(store, KEY, clock=Clock())  # names a page of the attacker's resolves to 127.*
    assert status(auth, request(host=host)) == 403
    assert status(auth, request(method="POST", host=host)) == 403


def test_token_list_shows_last_use_and_revocation(store):
    alice = store.create("alice")
    store.create("bob", admin=True)
    assert [(t.user, t.last_used_at, t.revoked_at) for t in store.users()] == [
        ("alice", "", ""), ("bob", "", "")]
    assert store.user(alice).name == "alice"
    store.revoke("bob")
    a, b = store.users()
    assert a.last_used_at and not a.revoked_at
    assert b.admin and not b.last_used_at and b.revoked_at


def test_a_session_is_checked_against_its_token_on_each_read(store):
    clock = Clock()
    alice = store.create("alice", admin=True)
    auth = Auth(store, KEY, clock=clock)
    cookie = auth.sign_in(alice)
    assert cookie and alice not in cookie and auth.sign_in("wrong") is None
    assert status(auth, request(cookie=cookie)) == "alice"
    assert auth.user(request(cookie=cookie)).admin
    # a cookie made up from a user name, an admin flag and a signature is no session
    assert status(auth, request(cookie="mallory|1|9999999999|" + "0" * 64)) == 401
    store.revoke("alice")
    clock.now += CACHE_S
    assert status(auth, request(cookie=cookie)) == 401  # revoked: the session ended with it


def test_a_token_keeps_its_newest_sessions_only(store):
    alice, bob = store.create("alice"), store.create("bob")
    theirs = store.open_session(bob, SESSION_S)
    mine = [store.open_session(alice, SESSION_S) for _ in range(MAX_SESSIONS_PER_TOKEN + 3)]
    live = [store.session_user(digest(c)) is not None for c in mine]
    assert live == [False] * 3 + [True] * MAX_SESSIONS_PER_TOKEN  # the oldest three ended
    assert store.session_user(digest(theirs)).name == "bob"  # another token's untouched


def test_sign_out_ends_the_session(store):
    bob = store.create("bob")
    auth = Auth(store, KEY, clock=Clock())
    cookie = auth.sign_in(bob)
    assert status(auth, request(cookie=cookie)) == "bob"
    auth.sign_out(request(cookie=cookie))
    assert status(auth, request(cookie=cookie)) == 401  # at once here
    other = Auth(store, KEY, clock=Clock())  # and in any other process reading the database
    assert status(other, request(cookie=cookie)) == 401


def test_the_database_holds_no_token_session_or_key(store, tmp_path):
    alice = store.create("alice")
    cookie = Auth(store, KEY, clock=Clock()).sign_in(alice)
    db = (tmp_path / "service.db").read_bytes()
    assert alice.encode() not in db and cookie.encode() not in db and KEY.hex().encode() not in db


def test_a_cookie_authorizes_a_json_change_only_with_csrf_or_same_origin(store):
    bob = store.create("bob")
    auth = Auth(store, KEY, clock=Clock())
    cookie = auth.sign_in(bob)
    post = {"method": "POST", "path": "/api/v1/studies/x/resume", "cookie": cookie}
    assert status(auth, request(**post)) == 403  # neither token nor origin
    assert status(auth, request(**post, origin="http://evil.example")) == 403
    assert status(auth, request(**post, origin="http://127.0.0.1:8471")) == 403  # same site
    assert status(auth, request(**post, origin=f"http://{HOST}")) == "bob"
    assert status(auth, request(**post, referer=f"http://{HOST}/studies/x")) == "bob"
    csrf = auth.csrf_token(request(cookie=cookie))
    assert status(auth, request(**post, **{CSRF_HEADER.replace("-", "_"): csrf})) == "bob"
    assert status(auth, request(**post, **{CSRF_HEADER.replace("-", "_"): "0" * 64})) == 403
    # a bearer token is not sent by a browser on its own; a foreign origin is refused anyway
    assert status(auth, request(method="POST", token=bob)) == "bob"
    assert status(auth, request(method="POST", token=bob, origin="http://evil.example")) == 403


def test_an_old_database_is_migrated_and_loses_its_session_key(tmp_path):
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'old.db'}")
    with engine.begin() as con:
        con.execute(sa.text("CREATE TABLE moetune_tokens (id INTEGER PRIMARY KEY, user "
                            "VARCHAR(64) NOT NULL, digest VARCHAR(64) NOT NULL UNIQUE, admin "
                            "BOOLEAN NOT NULL, created_at VARCHAR(32) NOT NULL)"))
        con.execute(sa.text("CREATE TABLE moetune_service_secrets (name VARCHAR(32) PRIMARY "
                            "KEY, value VARCHAR(128) NOT NULL)"))
        con.execute(sa.text("INSERT INTO moetune_service_secrets VALUES ('session', 'ab12')"))
    store = TokenStore(engine)
    alice = store.create("alice")
    assert store.user(alice).name == "alice" and store.users()[0].last_used_at
    with engine.connect() as con:
        assert con.execute(sa.text("SELECT * FROM moetune_service_secrets")).all() == []


def test_the_root_and_its_files_are_private(tmp_path):
    old = os.umask(0o022)
    try:
        root = tmp_path / "root"
        root.mkdir(mode=0o755)
        db = root / "service.db"
        for suffix in ("", "-wal", "-shm"):
            db.with_name(db.name + suffix).write_text("x")
            db.with_name(db.name + suffix).chmod(0o644)
        make_private(root, db)
        assert stat.S_IMODE(root.stat().st_mode) == 0o700
        for suffix in ("", "-wal", "-shm"):
            assert stat.S_IMODE(db.with_name(db.name + suffix).stat().st_mode) == 0o600
        (root / "new").write_text("x")  # what the process creates from now on
        assert stat.S_IMODE((root / "new").stat().st_mode) == 0o600
        key = csrf_key(root)
        assert len(key) == 32 and csrf_key(root) == key
        assert stat.S_IMODE((root / "csrf.key").stat().st_mode) == 0o600
    finally:
        os.umask(old)


def test_the_local_rays_temp_dir_is_a_folder_of_ours_alone(tmp_path):
    short = Path(tempfile.mkdtemp(dir="/tmp"))  # short enough for Ray's sockets under it
    try:
        got, fallback = ray_temp_dir(short)
        mode = stat.S_IMODE(got.parent.stat().st_mode)
    finally:
        shutil.rmtree(short)
    assert (got, fallback, mode) == (short / ".ray" / "r", None, 0o700)
    deep = tmp_path / ("d" * 60) / "root"  # Ray's socket paths under it would pass 107 bytes
    deep.mkdir(parents=True)
    got, fallback = ray_temp_dir(deep)
    try:
        assert fallback == got.parent and fallback.name.startswith("moetune-ray-")
        assert not (deep / ".ray").exists()
        assert stat.S_IMODE(fallback.stat().st_mode) == 0o700
        assert fallback.stat().st_uid == os.getuid()
        sock = f"{got}/session_2026-12-03_16-16-36_123456_4194304/sockets/plasma_store.99"
        assert len(sock.encode()) <= 107
    finally:
        fallback.rmdir()


def test_an_open_service_serves_only_whoever_shows_its_local_token(store, tmp_path):
    """Without access tokens, the loopback port is open to every account of the machine; the
    token `moetune serve` writes to ROOT/local.token (0600 in the 0700 root) is its starter's."""
    from tuner.app.service.access.private import LOCAL_TOKEN_FILE, local_token

    root = tmp_path / "root"
    make_private(root, None)
    token = local_token(root)
    assert (root / LOCAL_TOKEN_FILE).read_text().strip() == token
    assert stat.S_IMODE((root / LOCAL_TOKEN_FILE).stat().st_mode) == 0o600
    assert local_token(root) != token  # a new one at each start
    token = (root / LOCAL_TOKEN_FILE).read_text().strip()
    auth = Auth(store, KEY, clock=Clock(), local_token=token)
    assert status(auth, request()) == 401  # another local user: no token, no admin
    assert status(auth, request(method="DELETE", path="/api/v1/studies/x")) == 401
    assert status(auth, request(token="guess")) == 401
    assert status(auth, request(token=token)) == "local"
    assert status(auth, request(token=token, host="evil.example")) == 403  # still loopback only
    assert auth.sign_in("guess") is None
    cookie = auth.sign_in(token)
    assert cookie and status(auth, request(cookie=cookie)) == "local"
    assert status(auth, request(cookie="made-up")) == 401
    with pytest.raises(HTTPException) as e:  # a form of the local session needs its CSRF token
        auth.check_csrf(request(method="POST", path="/submit", cookie=cookie), "")
    assert e.value.status_code == 403
    auth.check_csrf(request(method="POST", path="/submit", cookie=cookie),
                    auth.csrf_token(request(cookie=cookie)))
    auth.sign_out(request(cookie=cookie))
    assert status(auth, request(cookie=cookie)) == 401
