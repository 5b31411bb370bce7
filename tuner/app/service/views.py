"""The study views the service sends (a study's summary or detail, as a dict and as its JSON
body), read from the storage off the request path.

Many clients poll one study: each view is read and encoded once, then every request is answered
with the same bytes. A view older than `TTL_S` is read again in the background while requests
keep getting the last one; a view older than `MAX_AGE_S` is not sent: the request waits for the
new read (a rarely polled view, or a read slower than the polling). So what a client sees is at
most `MAX_AGE_S` old, and under load no request waits for the storage. Reads run in one worker
thread, one at a time, so a burst of requests costs one read per view, and the event loop never
touches the storage.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

TTL_S = 0.5  # a view older than this is read again, in the background
MAX_AGE_S = 1.0  # a view older than this is not sent; the request waits for the new read
IDLE_S = 60.0  # a view nobody asked for in this long is dropped (a big study's is megabytes)

Key = tuple[str, str]  # (study name, "summary" or "detail")
View = tuple[dict[str, Any], bytes]  # the view and its JSON body (shared: never mutate)


class ViewCache:
    """Views of studies, read by ``read(name, kind)`` (which raises for a missing study)."""

    def __init__(self, read: Callable[[str, str], dict[str, Any]], *, ttl_s: float = TTL_S,
                 max_age_s: float = MAX_AGE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._read = read
        self._ttl_s = ttl_s
        self._max_age_s = max_age_s
        self._clock = clock
        self._lock = threading.Lock()
        self._views: dict[Key, tuple[float, View]] = {}  # key -> (when its read began, view)
        self._reading: dict[Key, Future[View]] = {}  # the read in flight for a key
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="moetune-views")

    def get(self, name: str, kind: str) -> View:
        """The view, waiting for a read only when there is none young enough to send."""
        got = self._lookup((name, kind))
        return got.result() if isinstance(got, Future) else got

    async def get_async(self, name: str, kind: str) -> View:
        """`get` for the event loop: a read it has to wait for is awaited, not blocked on."""
        got = self._lookup((name, kind))
        return await asyncio.wrap_future(got) if isinstance(got, Future) else got

    def forget(self, name: str) -> None:
        """Drop a study's views (after a change made here): the next request reads anew, and a
        read already in flight, begun before the change, is not kept."""
        with self._lock:
            for key in [k for k in (*self._views, *self._reading) if k[0] == name]:
                self._views.pop(key, None)
                self._reading.pop(key, None)

    def close(self) -> None:
        """Stop the worker once the reads queued have run."""
        self._worker.shutdown(wait=False)

    def _lookup(self, key: Key) -> View | Future[View]:
        with self._lock:
            hit = self._views.get(key)
            age = self._clock() - hit[0] if hit is not None else math.inf
            if hit is not None and age < self._ttl_s:
                return hit[1]
            reading = self._reading.get(key)
            if reading is None:
                reading = self._reading[key] = Future()
                self._worker.submit(self._refresh, key, reading)
            if hit is not None and age < self._max_age_s:
                return hit[1]  # young enough: sent while the new read runs
            return reading

    def _refresh(self, key: Key, reading: Future[View]) -> None:
        began = self._clock()
        try:
            value = self._read(*key)
            view = (value, json.dumps(value).encode())
        except BaseException as e:
            with self._lock:
                if self._reading.get(key) is reading:  # not forgotten meanwhile
                    del self._reading[key]
                    self._views.pop(key, None)  # a study gone (404) or a failed read: no view
            reading.set_exception(e)
            return
        with self._lock:
            if self._reading.get(key) is reading:
                del self._reading[key]
                self._views[key] = (began, view)
            for idle in [k for k, (t, _) in self._views.items() if began - t > IDLE_S]:
                del self._views[idle]
        reading.set_result(view)
