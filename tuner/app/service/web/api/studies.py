"""``/api/v1/studies``: submit a study, read it, follow its progress, cancel, resume and delete
it, read its report and export its recipe. Any signed-in user may read; cancel, resume and
delete need the owner or an admin (`Service`). Bad input gets a 4xx whose JSON ``detail`` names
the field, the rule and the value, and creates nothing.

The polled reads (the study, its event stream) are ``async`` and never touch the storage on the
event loop: the user comes from `auth.Auth.user_async` (cached), the study from
`views.ViewCache` (read in its own thread). The other routes are plain functions, which FastAPI
runs in its thread pool.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import FileResponse, Response, StreamingResponse
from pydantic import BaseModel, Field

from tuner.app.requests.actions import (
    MESSAGES_HEADER,
    CancelRequest,
    DeleteRequest,
    ExportRequest,
    ResumeRequest,
)
from tuner.app.requests.studies import ENDED
from tuner.app.requests.submit import SubmitRequest
from tuner.app.service.web.api.deps import ServiceDep, Who

STREAM_INTERVAL_S = 0.5  # with views at most 1 s old, a page sees progress within 1.5 s

router = APIRouter(prefix="/studies", tags=["studies"])


class SubmitBody(BaseModel):
    """A study spec as TOML text (the space inline, or a space shipped with moetune)."""

    spec: str = Field(description="the study spec, TOML")
    name: str | None = Field(default=None, description="overrides [study] name")
    space: str | None = Field(default=None, description="the TOML of the space file the spec "
                              "names, when it is not one shipped with moetune")


@router.get("", summary="every study, with state and progress")
def list_studies(service: ServiceDep, who: Who) -> list[dict[str, Any]]:
    return service.summaries()


@router.post("", status_code=201, summary="queue a study from a spec")
def submit(body: SubmitBody, service: ServiceDep, who: Who) -> dict[str, Any]:
    name = service.submit(SubmitRequest.from_body(body.spec, name=body.name, space=body.space),
                          who)
    return service.view(name, "summary")


@router.get("/{name}", summary="one study: state, progress, trials, front, knee")
async def get_study(name: str, service: ServiceDep, who: Who) -> Response:
    _, body = await service.view_async(name, "detail")
    return Response(body, media_type="application/json")


@router.get("/{name}/events", summary="live progress (Server-Sent Events)")
async def events(name: str, request: Request, service: ServiceDep, who: Who) -> Response:
    await service.view_async(name, "detail")  # 404 before the stream starts

    async def stream() -> AsyncIterator[str]:
        last = b""
        while not await request.is_disconnected():
            try:  # each turn: a token revoked, a session ended, stops the stream (the cache
                await service.auth.user_async(request)  # reads within CACHE_S)
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


@router.post("/{name}/cancel", summary="stop a study; running trials end as interrupted and "
             "are re-run on resume")
def cancel(name: str, service: ServiceDep, who: Who) -> dict[str, str]:
    return {"state": service.cancel(CancelRequest(study=name, by=who.name), who)}


@router.post("/{name}/resume", summary="queue a cancelled, failed or interrupted study again")
def resume(name: str, service: ServiceDep, who: Who) -> dict[str, str]:
    return {"state": service.resume(ResumeRequest(study=name), who)}


@router.delete("/{name}", status_code=204, summary="delete an ended study")
def delete(name: str, service: ServiceDep, who: Who) -> Response:
    service.delete(DeleteRequest(study=name), who)
    return Response(status_code=204)


@router.get("/{name}/report", summary="the study's report.html (opens offline)")
def report(name: str, service: ServiceDep, who: Who) -> FileResponse:
    return FileResponse(service.report(service.study(name)), media_type="text/html")


@router.post("/{name}/export", summary="the chosen recipe scaled to the full run, as a launch "
             "config (moetune export's options as JSON); a zip of it and its sidecar for the "
             "formats that have one")
def export(name: str, options: dict[str, Any], service: ServiceDep, who: Who) -> Response:
    body, filename, media_type, said = service.export_download(
        ExportRequest.from_options(name, options))
    return Response(body, media_type=media_type,
                    headers={"Content-Disposition": f'attachment; filename="{filename}"',
                             MESSAGES_HEADER: json.dumps(said)})
