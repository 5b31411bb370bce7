"""The service's FastAPI application, put together: its middleware, its error answers, the JSON
API's routers under ``/api/v1`` (OpenAPI at ``/openapi.json``, for a signed-in user; no Swagger
page, which would load from a CDN), the pages' routers and their files at ``/assets``, and
Optuna's dashboard mounted read-only. Every response carries the frame and type headers, the
pages a Content-Security-Policy (`headers.SecurityHeaders`).

A new endpoint is a route in the router of its resource (`api.studies`, `api.users`; a page in
`pages.studies`, `pages.submit`, `pages.session`); a new resource is a module with its own
``router``, added to `ROUTERS`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI
from fastapi.responses import JSONResponse
from starlette.staticfiles import StaticFiles

from tuner.app.service.context import Service
from tuner.app.service.web import errors
from tuner.app.service.web.api import studies, users
from tuner.app.service.web.api.deps import Who
from tuner.app.service.web.body_limit import BodyLimit
from tuner.app.service.web.dashboard_mount import mount_dashboard
from tuner.app.service.web.headers import SecurityHeaders
from tuner.app.service.web.pages import render
from tuner.app.service.web.pages import session as session_pages
from tuner.app.service.web.pages import studies as study_pages
from tuner.app.service.web.pages import submit as submit_pages

API_PREFIX = "/api/v1"
# (router, prefix): the JSON API's resources, then the pages'
ROUTERS: tuple[tuple[APIRouter, str], ...] = (
    (studies.router, API_PREFIX), (users.router, API_PREFIX),
    (study_pages.router, ""), (submit_pages.router, ""), (session_pages.router, ""))


def create_app(service: Service) -> FastAPI:
    """The application for ``service`` (its scheduler runs while the app does)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service.scheduler.start()
        yield
        service.scheduler.stop()
        service.views.close()

    # no /docs or /redoc: FastAPI's pages load Swagger UI and ReDoc from a CDN; the OpenAPI
    # description is served below, behind the same sign-in as every route
    app = FastAPI(title="moetune", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None,
                  description="Hyperparameter autotuning studies for DeepSeek-V3-style MoE "
                              "training recipes: submit, watch, cancel, report, export.")
    app.state.service = service
    app.add_middleware(BodyLimit, max_bytes=service.config.max_body_bytes)
    app.add_middleware(SecurityHeaders)
    errors.install(app)
    app.add_exception_handler(render.SignInFirst, render.to_signin)
    for router, prefix in ROUTERS:
        app.include_router(router, prefix=prefix)

    @app.get("/openapi.json", include_in_schema=False)
    async def openapi(who: Who) -> JSONResponse:
        return JSONResponse(app.openapi())

    app.mount("/assets", StaticFiles(directory=render.STATIC), name="assets")
    mount_dashboard(app, service)
    return app
