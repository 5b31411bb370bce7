"""The request size limit: a body past ``max_bytes`` gets a 413 and is not read further.

A body that declares its length (``Content-Length``) is refused before any of it is read; one
sent in chunks (``Transfer-Encoding: chunked``, no length) is counted as the application reads
it and refused at the first chunk past the limit, so neither is ever held in memory whole. A
plain ASGI middleware (not Starlette's ``BaseHTTPMiddleware``, which adds a task and a stream per
request): it costs a header lookup on every request.
"""

from __future__ import annotations

from fastapi import HTTPException
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` past the limit; FastAPI's handlers answer it as a 413."""

    def __init__(self, limit: int, got: str) -> None:
        super().__init__(413, f"request: the body must be at most {limit} bytes, but got "
                              f"{got}.")


class BodyLimit:
    """ASGI middleware refusing request bodies over ``max_bytes`` with a 413."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = next((v for k, v in scope["headers"] if k == b"content-length"), b"")
        if length.isdigit() and int(length) > self.max_bytes:
            await _refuse(BodyTooLarge(self.max_bytes, length.decode()), scope, receive, send)
            return
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes, f"more: a chunked body, {seen} "
                                                       "bytes when reading stopped")
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except BodyTooLarge as e:  # raised outside a FastAPI handler (e.g. the mounted app)
            if started:
                raise
            await _refuse(e, scope, receive, send)


async def _refuse(error: BodyTooLarge, scope: Scope, receive: Receive, send: Send) -> None:
    # the rest of the body is not read by the application: uvicorn drops it as it arrives
    # (the connection stays usable, and the client gets this answer, not a reset)
    await JSONResponse({"detail": error.detail}, status_code=413)(scope, receive, send)
