"""The service's FastAPI application: the JSON API (OpenAPI at ``/openapi.json``, for a
signed-in user; no Swagger page, which would load from a CDN), the live progress stream, the
pages, and Optuna's dashboard mounted read-only. Every response carries the frame and type
headers, the pages a Content-Security-Policy (`headers.SecurityHeaders`).

Every route needs a user (`auth.Auth.user`): any user may read; cancel, delete and resume need
the owner or an admin. Bad input gets a 4xx whose JSON ``detail`` names the field, the rule and
the value, and creates nothing.

The polled reads (a study's status, its event stream, whoami) are ``async`` and never touch the
storage on the event loop: the user comes from `auth.Auth.user_async` (cached), the study from
`views.ViewCache` (read in its own thread). The other routes are plain functions, which FastAPI
runs in its thread pool.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field
from starlette.types import Receive, Scope, Send

from tuner.app.requests.actions import (
    MESSAGES_HEADER,
    CancelRequest,
    DeleteRequest,
    ExportRequest,
    RequestError,
    ResumeRequest,
)
from tuner.app.requests.studies import ENDED, TransitionError
from tuner.app.requests.submit import SubmitRequest
from tuner.app.service.access.tokens import User
from tuner.app.service.context import Service, SubmitError
from tuner.app.service.running.faults import (
    RETRY_AFTER_S,
    STORAGE_ERRORS,
    disk_full,
    storage_error_detail,
)
from tuner.app.service.web import pages
from tuner.app.service.web.body_limit import BodyLimit
from tuner.app.service.web.dashboard import DashboardStorage
from tuner.app.service.web.headers import SecurityHeaders

STREAM_INTERVAL_S = 0.5  # with views at most 1 s old, a page sees progress within 1.5 s


async def current_user(request: Request) -> User:
    """The request's user (401 when tokens are configured and none valid was sent)."""
    service: Service = request.app.state.service
    return await service.auth.user_async(request)


Who = Annotated[User, Depends(current_user)]


class SubmitBody(BaseModel):
    """A study spec as TOML text (the space inline, or a space shipped with moetune)."""

    spec: str = Field(description="the study spec, TOML")
    name: str | None = Field(default=None, description="overrides [study] name")
    space: str | None = Field(default=None, description="the TOML of the space file the spec "
                              "names, when it is not one shipped with moetune")


def create_app(service: Service) -> FastAPI:
    """The application for ``service`` (its scheduler runs while the app does)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service.scheduler.start()
        yield
        service.scheduler.stop()
        service.views.close()

    # no /docs or /redoc: FastAPI's pages load Swagger UI and ReDoc from a CDN; the OpenAPI
    # description stays at /openapi.json for any signed-in client or viewer to read
    app = FastAPI(title="moetune", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None,  # served below, behind the same sign-in as every route
                  description="Hyperparameter autotuning studies for DeepSeek-V3-style MoE "
                              "training recipes: submit, watch, cancel, report, export.")
    app.state.service = service
    app.add_middleware(BodyLimit, max_bytes=service.config.max_body_bytes)
    app.add_middleware(SecurityHeaders)

    @app.exception_handler(SubmitError)
    async def submit_error(request: Request, exc: SubmitError) -> JSONResponse:
        # 422; 429 or 507 past a user's quota (`quotas`)
        return JSONResponse({"detail": str(exc), "field": exc.field}, status_code=exc.status)

    @app.exception_handler(RequestError)  # a typed request refused (`tuner.app.requests.actions`)
    async def request_error(request: Request, exc: RequestError) -> JSONResponse:
        return JSONResponse({"detail": str(exc), "field": exc.field}, status_code=422)

    @app.exception_handler(RequestValidationError)
    async def invalid_body(request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's own answer echoes each bad value, and a non-finite number (1e999, NaN,
        # Infinity, which Python's JSON parser reads) cannot be written back as JSON: a 500
        errors = [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")),
                   "type": str(e.get("type", ""))} for e in exc.errors()]
        field = ".".join(str(x) for x in errors[0]["loc"][1:]) if errors else "body"
        return JSONResponse({"detail": errors, "field": field or "body"}, status_code=422)

    @app.exception_handler(TransitionError)
    async def transition_error(request: Request, exc: TransitionError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=409)  # a race: try again

    for error in STORAGE_ERRORS:
        app.add_exception_handler(error, _storage_down)
    app.add_exception_handler(OSError, _os_error)
    app.add_exception_handler(Exception, _internal_error)  # JSON, not Starlette's plain text

    @app.get("/api/v1/studies", summary="every study, with state and progress")
    def list_studies(who: Who) -> list[dict[str, Any]]:
        return service.summaries()

    @app.post("/api/v1/studies", status_code=201, summary="queue a study from a spec")
    def submit(body: SubmitBody, who: Who) -> dict[str, Any]:
        name = service.submit(SubmitRequest.from_body(body.spec, name=body.name,
                                                      space=body.space), who)
        return service.view(name, "summary")

    @app.get("/api/v1/studies/{name}", summary="one study: state, progress, trials, front, knee")
    async def get_study(name: str, who: Who) -> Response:
        _, body = await service.view_async(name, "detail")
        return Response(body, media_type="application/json")

    @app.get("/api/v1/studies/{name}/events", summary="live progress (Server-Sent Events)")
    async def events(name: str, request: Request, who: Who) -> Response:
        await service.view_async(name, "detail")  # 404 before the stream starts

        async def stream() -> AsyncIterator[str]:
            last = b""
            while not await request.is_disconnected():
                try:  # each turn: a token revoked, a session ended, stops the stream (the
                    await service.auth.user_async(request)  # cache reads within CACHE_S)
                except HTTPException as e:
                    yield f"event: end\ndata: {json.dumps({'detail': e.detail})}\n\n"
                    return
                data, body = await service.view_async(name, "detail")
                if body != last:
                    yield f"event: progress\ndata: {body.decode()}\n\n"
                    last = body
                if data["state"] in ENDED:
                    yield f"event: end\ndata: {json.dumps({'state': data['state']})}\n\n"
                    return
                await asyncio.sleep(STREAM_INTERVAL_S)

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store"})

    @app.post("/api/v1/studies/{name}/cancel", summary="stop a study; running trials end as "
              "interrupted and are re-run on resume")
    def cancel(name: str, who: Who) -> dict[str, str]:
        return {"state": service.cancel(CancelRequest(study=name, by=who.name), who)}

    @app.post("/api/v1/studies/{name}/resume", summary="queue a cancelled, failed or interrupted "
              "study again")
    def resume(name: str, who: Who) -> dict[str, str]:
        return {"state": service.resume(ResumeRequest(study=name), who)}

    @app.delete("/api/v1/studies/{name}", status_code=204, summary="delete an ended study")
    def delete(name: str, who: Who) -> Response:
        service.delete(DeleteRequest(study=name), who)
        return Response(status_code=204)

    @app.get("/api/v1/studies/{name}/report", summary="the study's report.html (opens offline)")
    def report(name: str, who: Who) -> FileResponse:
        return FileResponse(service.report(service.study(name)), media_type="text/html")

    @app.post("/api/v1/studies/{name}/export", summary="the chosen recipe scaled to the full run, "
              "as a launch config (moetune export's options as JSON); a zip of it and its "
              "sidecar for the formats that have one")
    def export(name: str, options: dict[str, Any], who: Who) -> Response:
        body, filename, media_type, said = service.export_download(
            ExportRequest.from_options(name, options))
        return Response(body, media_type=media_type,
                        headers={"Content-Disposition": f'attachment; filename="{filename}"',
                                 MESSAGES_HEADER: json.dumps(said)})

    @app.get("/openapi.json", include_in_schema=False)
    async def openapi(who: Who) -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/api/v1/whoami", summary="the user a token or session belongs to")
    async def whoami(who: Who) -> dict[str, Any]:
        return {"user": who.name, "admin": who.admin}

    pages.register(app, service)
    _mount_dashboard(app, service)
    return app


async def _storage_down(request: Request, exc: Exception) -> Response:
    return JSONResponse({"detail": storage_error_detail(exc)}, status_code=503,
                        headers={"Retry-After": str(RETRY_AFTER_S)})


async def _os_error(request: Request, exc: Exception) -> Response:
    if disk_full(exc):
        return await _storage_down(request, exc)
    return await _internal_error(request, exc)


async def _internal_error(request: Request, exc: Exception) -> Response:
    # the exception itself goes to the service's log (Starlette re-raises it after this)
    return JSONResponse({"detail": f"internal error ({type(exc).__name__}); the service "
                                   "logged it."}, status_code=500)


def _mount_dashboard(app: FastAPI, service: Service) -> None:
    """Optuna's dashboard at /dashboard, read-only and behind the same sign-in: its own API
    creates, renames and deletes studies and tells trials, which would bypass ownership, so it
    gets a read-only view of the storage (`dashboard.DashboardStorage`), and only GET and HEAD
    reach it.

    The dashboard's page asks for its script and its API at fixed root paths (``/static``,
    ``/api/...``), so it is mounted at the root, after every route of ours: moetune's API
    lives under ``/api/v1`` and everything no route of ours answers goes to the dashboard."""
    import optuna_dashboard
    from a2wsgi import WSGIMiddleware


    # a2wsgi and Starlette type the same ASGI messages with different classes
    wsgi: Any = WSGIMiddleware(optuna_dashboard.wsgi(DashboardStorage(service.storage)))

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            request = Request(scope, receive)
            if scope["method"] not in ("GET", "HEAD"):
                await JSONResponse({"detail": "dashboard: read-only here; change studies "
                                              "through moetune."}, status_code=405)(
                    scope, receive, send)
                return
            try:
                await service.auth.user_async(request)
            except HTTPException as e:
                await JSONResponse({"detail": e.detail}, status_code=e.status_code)(
                    scope, receive, send)
                return
            after = request.query_params.get("after")
            if after is not None and not after.isdigit():  # the dashboard's int() would 500
                await JSONResponse({"detail": f"after: must be a whole number of trials, but "
                                              f"got {after[:40]!r}.", "field": "after"},
                                   status_code=422)(scope, receive, send)
                return
            if "accept-encoding" not in request.headers:  # the dashboard's static files
                # read it unguarded (a KeyError, a 500, without it): none means identity
                scope = {**scope, "headers": [*scope["headers"],
                                              (b"accept-encoding", b"identity")]}
        await wsgi(scope, receive, send)

    app.mount("/", guarded)
