"""The study pages: ``/`` (every study, polled), ``/studies/NAME`` (one study, live), its
Cancel, Resume and Delete buttons and its export form. The buttons and the form call the same
`Service` actions as the JSON API."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Form, HTTPException, Request
from fastapi.responses import RedirectResponse, Response

from tuner.app.requests.actions import CancelRequest, DeleteRequest, ExportRequest, ResumeRequest
from tuner.app.requests.studies import ACTIVE, ENDED, EXTERNAL_WORDS
from tuner.app.service.web.api.deps import ServiceDep
from tuner.app.service.web.pages.render import PageUser, page
from tuner.export.formats import FORMATS

router = APIRouter(include_in_schema=False)

# the states a study page's button is shown in: those its action is allowed from (studies.py)
BUTTON_STATES = {"cancel": ("queued", *ACTIVE), "resume": ("cancelled", "failed", "interrupted"),
                 "delete": ENDED}


@router.get("/")
def index(request: Request, service: ServiceDep, who: PageUser) -> Response:
    return page(request, service, "studies.html", "Studies", who, external=EXTERNAL_WORDS)


@router.get("/studies/{name}")
def study_page(name: str, request: Request, service: ServiceDep, who: PageUser) -> Response:
    data = service.view(name, "detail")
    states = dict(BUTTON_STATES)
    if data.get("attached_owner"):  # `serve --attach`: its owner may cancel it
        states["cancel"] = (*states["cancel"], "external")
    return page(request, service, "study.html", name, who, name=name, owner=data["owner"],
                state=data["state"], states=states, external=EXTERNAL_WORDS,
                from_cli=data["state"] == "external" and not data["owner"],
                formats=list(FORMATS))  # every launch format the export renders


@router.post("/studies/{name}/export")
def export_form(name: str, request: Request, service: ServiceDep, who: PageUser,
                csrf: str = Form(""), pick: str = Form("knee"), target: str = Form(""),
                hardware: str = Form("h800"), gpus: str = Form(""), tokens: str = Form(""),
                format: str = Form("native"), reference: str = Form("")) -> Response:
    service.auth.check_csrf(request, csrf)
    options: dict[str, Any] = {"pick": pick.split(), "target": target, "hardware": hardware,
                               "gpus": gpus, "tokens": tokens, "format": format,
                               "reference": reference.strip() or None}  # empty: none
    body, filename, media_type = service.export(ExportRequest.from_options(name, options))
    return Response(body, media_type=media_type,
                    headers={"Content-Disposition": f'attachment; filename="{filename}"'})


@router.post("/studies/{name}/{action}")
def act(name: str, action: str, request: Request, service: ServiceDep, who: PageUser,
        csrf: str = Form("")) -> Response:
    """The study page's Cancel, Resume and Delete buttons."""
    if action not in BUTTON_STATES:
        raise HTTPException(404, f"action: must be cancel, resume or delete, but got "
                                 f"{action!r}.")
    service.auth.check_csrf(request, csrf)
    try:
        if action == "cancel":
            service.cancel(CancelRequest(study=name, by=who.name), who)
        elif action == "delete":
            service.delete(DeleteRequest(study=name), who)
        else:
            service.resume(ResumeRequest(study=name), who)
    except HTTPException as e:
        if e.status_code not in (409, 507):  # refused in the study's state or past the owner's
            raise  # disk quota: said on a page, not JSON
        return page(request, service, "refused.html", name, who, status_code=e.status_code,
                    name=name, detail=str(e.detail))
    return RedirectResponse("/" if action == "delete" else f"/studies/{name}", status_code=303)
