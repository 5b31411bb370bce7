"""How the service answers an error, as JSON: a refused request names its field (422; a quota
429 or 507), a race is a 409, failing storage a 503 with Retry-After, anything else a 500 that
names only the exception's type (the exception itself goes to the service's log)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from tuner.app.requests.actions import RequestError
from tuner.app.requests.studies import TransitionError
from tuner.app.service.context import SubmitError
from tuner.app.service.running.faults import (
    RETRY_AFTER_S,
    STORAGE_ERRORS,
    disk_full,
    storage_error_detail,
)


def install(app: FastAPI) -> None:
    """Add the service's error answers to ``app``."""
    app.add_exception_handler(SubmitError, submit_error)
    app.add_exception_handler(RequestError, request_error)
    app.add_exception_handler(RequestValidationError, invalid_body)
    app.add_exception_handler(TransitionError, transition_error)
    for error in STORAGE_ERRORS:
        app.add_exception_handler(error, storage_down)
    app.add_exception_handler(OSError, os_error)
    app.add_exception_handler(Exception, internal_error)  # JSON, not Starlette's plain text


async def submit_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SubmitError)  # 422; 429 or 507 past a user's quota (`quotas`)
    return JSONResponse({"detail": str(exc), "field": exc.field}, status_code=exc.status)


async def request_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestError)  # a typed request refused (`tuner.app.requests.actions`)
    return JSONResponse({"detail": str(exc), "field": exc.field}, status_code=422)


async def invalid_body(request: Request, exc: Exception) -> Response:
    # FastAPI's own answer echoes each bad value, and a non-finite number (1e999, NaN,
    # Infinity, which Python's JSON parser reads) cannot be written back as JSON: a 500
    assert isinstance(exc, RequestValidationError)
    errors = [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")),
               "type": str(e.get("type", ""))} for e in exc.errors()]
    field = ".".join(str(x) for x in errors[0]["loc"][1:]) if errors else "body"
    return JSONResponse({"detail": errors, "field": field or "body"}, status_code=422)


async def transition_error(request: Request, exc: Exception) -> Response:
    return JSONResponse({"detail": str(exc)}, status_code=409)  # a race: try again


async def storage_down(request: Request, exc: Exception) -> Response:
    return JSONResponse({"detail": storage_error_detail(exc)}, status_code=503,
                        headers={"Retry-After": str(RETRY_AFTER_S)})


async def os_error(request: Request, exc: Exception) -> Response:
    if disk_full(exc):
        return await storage_down(request, exc)
    return await internal_error(request, exc)


async def internal_error(request: Request, exc: Exception) -> Response:
    # the exception itself goes to the service's log (Starlette re-raises it after this)
    return JSONResponse({"detail": f"internal error ({type(exc).__name__}); the service "
                                   "logged it."}, status_code=500)
