"""The service's polled read path, without a server: study views read off the request path
(`views.ViewCache`) and the request's user resolved without a database read per request
(`auth.Auth`). A fake clock stands in for time; readers count their reads."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from fastapi import HTTPException
from starlette.requests import Request

from tuner.app.service.access.auth import CACHE_S, LOCAL, Auth
from tuner.app.service.access.tokens import TokenStore
from tuner.app.service.views import IDLE_S, MAX_AGE_S, TTL_S, ViewCache

KEY = bytes(32)  # the CSRF key: these tests post no form


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Reader:
    """A study's view; ``version`` is what the storage holds now. ``gate`` (when set) holds
    each read until it is opened."""

    def __init__(self) -> None:
        self.version = 1
        self.reads = 0
        self.started = threading.Event()
        self.gate: threading.Event | None = None

    def __call__(self, name: str, kind: str) -> dict:
        if name == "missing":
            raise HTTPException(404, f"study: no study named {name!r}.")
        version = self.version  # what the read sees, as a storage read begun now would
        self.reads += 1
        self.started.set()
        if self.gate is not None:
            assert self.gate.wait(30)
        return {"name": name, "kind": kind, "version": version}


@pytest.fixture
def setup():
    clock, reader = Clock(), Reader()
    cache = ViewCache(reader, clock=clock)
    yield cache, clock, reader
    cache.close()


def settle(cache: ViewCache) -> None:
    """Until the read in flight (if any) has been stored."""
    cache._worker.submit(lambda: None).result(timeout=30)


def test_a_young_view_is_sent_as_is(setup):
    cache, clock, reader = setup
    value, body = cache.get("s", "detail")
    assert value["version"] == 1 and json.loads(body) == value and reader.reads == 1
    reader.version = 2
    clock.now += TTL_S * 0.9
    assert cache.get("s", "detail") == (value, body) and reader.reads == 1  # no read
    assert cache.get("s", "summary")[0]["kind"] == "summary" and reader.reads == 2


def test_a_stale_view_is_sent_while_one_read_runs_in_the_background(setup):
    cache, clock, reader = setup
    old = cache.get("s", "detail")
    reader.version, reader.gate = 2, threading.Event()
    reader.started.clear()
    clock.now += (TTL_S + MAX_AGE_S) / 2
    for _ in range(20):  # a burst of requests: each gets the last view, none waits
        assert cache.get("s", "detail") is old
    assert reader.started.wait(30)
    reader.gate.set()
    settle(cache)
    assert reader.reads == 2  # one read for the burst
    assert cache.get("s", "detail")[0]["version"] == 2


def test_a_view_past_its_max_age_is_not_sent(setup):
    cache, clock, reader = setup
    cache.get("s", "detail")
    reader.version = 2
    clock.now += MAX_AGE_S
    assert cache.get("s", "detail")[0]["version"] == 2  # waited for the new read


def test_a_read_begun_before_a_change_is_not_kept(setup):
    """`forget` after cancel: a read in flight saw the study before the change."""
    cache, clock, reader = setup
    reader.gate = threading.Event()
    first = threading.Thread(target=cache.get, args=("s", "detail"))
    first.start()
    assert reader.started.wait(30)  # reading version 1
    reader.version = 2
    cache.forget("s")
    reader.gate.set()
    first.join(30)
    assert cache.get("s", "detail")[0]["version"] == 2


def test_a_view_nobody_asks_for_is_dropped(setup):
    cache, clock, reader = setup
    cache.get("old", "detail")
    clock.now += IDLE_S + 1
    cache.get("new", "detail")
    assert [k[0] for k in cache._views] == ["new"]


def test_a_failed_read_is_raised_and_nothing_kept(setup):
    cache, clock, reader = setup
    for _ in range(2):
        with pytest.raises(HTTPException) as e:
            cache.get("missing", "detail")
        assert e.value.status_code == 404
    assert not cache._views


def test_the_event_loop_awaits_a_read_and_is_answered_from_the_cache_after(setup):
    cache, clock, reader = setup

    async def two_reads() -> tuple:
        loop_thread = threading.get_ident()
        seen: list[int] = []
        original = reader.__call__

        def where(name: str, kind: str) -> dict:
            seen.append(threading.get_ident())
            return original(name, kind)

        cache._read = where
        first = await cache.get_async("s", "detail")
        second = await cache.get_async("s", "detail")
        return first, second, seen, loop_thread

    first, second, seen, loop_thread = asyncio.run(two_reads())
    assert first is second and reader.reads == 1
    assert seen and loop_thread not in seen  # the storage read ran off the event loop


class CountingTokens(TokenStore):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.any_reads = 0
        self.user_reads = 0

    def any(self) -> bool:
        self.any_reads += 1
        return super().any()

    def user_by_digest(self, hashed: str):
        self.user_reads += 1
        return super().user_by_digest(hashed)


def request(token: str = "") -> Request:
    headers = [(b"host", b"127.0.0.1:8470")]
    headers += [(b"authorization", f"Bearer {token}".encode())] if token else []
    return Request({"type": "http", "method": "GET", "headers": headers})


@pytest.fixture
def tokens(tmp_path):
    import sqlalchemy as sa

    return CountingTokens(sa.create_engine(f"sqlite:///{tmp_path / 'tokens.db'}"))


def test_a_token_is_read_from_the_database_once_per_cache_time(tokens):
    clock = Clock()
    auth = Auth(tokens, KEY, clock=clock)
    assert auth.user(request()) == LOCAL  # no tokens yet: the loopback user
    alice = tokens.create("alice")
    assert auth.user(request()) == LOCAL  # the count read within CACHE_S still holds...
    clock.now += CACHE_S
    with pytest.raises(HTTPException) as e:  # ...and then the new token counts
        auth.user(request())
    assert e.value.status_code == 401
    any_reads = tokens.any_reads
    for _ in range(50):
        assert auth.user(request(alice)).name == "alice"
    assert tokens.user_reads == 1 and tokens.any_reads == any_reads
    clock.now += CACHE_S
    assert auth.user(request(alice)).name == "alice" and tokens.user_reads == 2


def test_an_unknown_token_is_refused_every_time(tokens):
    tokens.create("alice")
    auth = Auth(tokens, KEY, clock=Clock())
    for _ in range(3):
        with pytest.raises(HTTPException) as e:
            auth.user(request("not-a-token"))
        assert e.value.status_code == 401 and "unknown token" in e.value.detail
    assert tokens.user_reads == 3  # never cached as anyone


def test_the_event_loop_resolves_a_known_token_without_the_database(tokens):
    alice = tokens.create("alice", admin=True)
    auth = Auth(tokens, KEY, clock=Clock())

    async def resolve() -> list:
        return [await auth.user_async(request(alice)) for _ in range(5)]

    users = asyncio.run(resolve())
    assert {u.name for u in users} == {"alice"} and users[0].admin
    assert tokens.user_reads == 1  # the first, in a worker thread; the rest from the cache
    with pytest.raises(HTTPException):
        asyncio.run(auth.user_async(request("not-a-token")))
