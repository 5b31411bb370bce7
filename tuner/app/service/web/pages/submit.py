"""``/submit``: the spec form, and its post: the study queued (then its page), or the form again
with the refusal beside the field it names."""

from __future__ import annotations

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from tuner.app.requests.submit import SubmitRequest
from tuner.app.service.context import SubmitError
from tuner.app.service.web.api.deps import ServiceDep
from tuner.app.service.web.pages.render import PageUser, page

router = APIRouter(prefix="/submit", include_in_schema=False)


@router.get("")
def submit_page(request: Request, service: ServiceDep, who: PageUser) -> Response:
    return page(request, service, "submit.html", "Submit", who, spec="", name="", error=None)


@router.post("")
def submit_form(request: Request, service: ServiceDep, who: PageUser, spec: str = Form(""),
                name: str = Form(""), csrf: str = Form("")) -> Response:
    service.auth.check_csrf(request, csrf)
    try:
        study = service.submit(SubmitRequest.from_body(spec, name=name.strip() or None), who)
    except SubmitError as e:
        # said once (the message names no field twice), beside the field it names
        return page(request, service, "submit.html", "Submit", who, status_code=e.status,
                    spec=spec, name=name, error=e, on_name=e.field == "study.name",
                    error_text=str(e).removeprefix(f"{e.field}: "))
    return RedirectResponse(f"/studies/{study}", status_code=303)
