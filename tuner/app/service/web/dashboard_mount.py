"""Optuna's dashboard at ``/dashboard``, read-only and behind the same sign-in as every route.

Its own API creates, renames and deletes studies and tells trials, which would bypass
ownership, so it gets a read-only view of the storage (`dashboard.DashboardStorage`), and only
GET and HEAD reach it. The dashboard's page asks for its script and its API at fixed root paths
(``/static``, ``/api/...``), so it is mounted at the root, after every route of ours: moetune's
API lives under ``/api/v1``, its pages' files under ``/assets``, and everything no route of ours
answers goes to the dashboard."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from tuner.app.service.context import Service
from tuner.app.service.web.dashboard import DashboardStorage


def mount_dashboard(app: FastAPI, service: Service) -> None:
    """Mount the dashboard at the root of ``app`` (call it last)."""
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
