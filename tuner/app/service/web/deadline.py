"""A deadline for each request's headers and body: a connection that has not sent a whole
request within `REQUEST_S` of opening (or of its last response) is closed.

uvicorn 0.54 has none: its keep-alive timer runs only between requests, so a client that sends
half a request line and waits holds a connection (and a file descriptor) for good; 300 of them
were still open after 65 s. This is uvicorn's own h11 protocol with a timer added
(``uvicorn/protocols/http/h11_impl.py`` in uvicorn 0.54.0: ``H11Protocol``; a request is whole
once its ``RequestResponseCycle`` has ``more_body`` False), passed to ``uvicorn.run(http=...)``.
A response may take as long as it needs (the event stream stays open): only receiving the
request is timed.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

REQUEST_S = 10.0  # to send a whole request: headers and body


class DeadlineH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request is not whole in time."""

    request_s = REQUEST_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._waiting_after: Any = None  # the cycle answered before the request awaited

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(after=None)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._deadline is not None and self._request_whole():
            self._disarm()

    def on_response_complete(self) -> None:
        answered = self.cycle  # a pipelined request may be read inside super()'s call
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm(after=answered)  # the next request on this connection has the same time

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _request_whole(self) -> bool:
        """Whether a request newer than the last one answered has arrived whole."""
        cycle = self.cycle
        return cycle is not None and cycle is not self._waiting_after and not cycle.more_body

    def _arm(self, *, after: Any) -> None:
        self._disarm()
        self._waiting_after = after
        self._deadline = self.loop.call_later(self.request_s, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if not self.transport.is_closing() and not self._request_whole():
            self.transport.close()


def protocol(request_s: float) -> type[DeadlineH11Protocol]:
    """The protocol class with a deadline of ``request_s`` seconds."""
    return type("DeadlineH11Protocol", (DeadlineH11Protocol,), {"request_s": request_s})
