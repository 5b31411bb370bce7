"""``/signin`` and ``/signout``: a token traded for a session cookie, and the session ended."""

from __future__ import annotations

from fastapi import APIRouter, Form, HTTPException, Request
from fastapi.responses import RedirectResponse, Response

from tuner.app.service.access.auth import COOKIE, SESSION_S, same_origin
from tuner.app.service.web.api.deps import ServiceDep
from tuner.app.service.web.pages.render import page

router = APIRouter(include_in_schema=False)


@router.get("/signin")
def signin_page(request: Request, service: ServiceDep) -> Response:
    return page(request, service, "signin.html", "Sign in", None, error="")


@router.post("/signin")
def signin(request: Request, service: ServiceDep, token: str = Form("")) -> Response:
    if same_origin(request) is False:  # another site signing the browser in as someone
        raise HTTPException(403, "origin: sign in from this service's own page, but got "
                                 f"Origin {request.headers.get('origin', 'none')!r}.")
    cookie = service.auth.sign_in(token.strip())
    if cookie is None:
        return page(request, service, "signin.html", "Sign in", None, status_code=401,
                    error="unknown token")
    signed_in = RedirectResponse("/", status_code=303)
    signed_in.set_cookie(COOKIE, cookie, max_age=SESSION_S, httponly=True, samesite="strict",
                         secure=request.url.scheme == "https")
    return signed_in


@router.post("/signout")
def signout(request: Request, service: ServiceDep, csrf: str = Form("")) -> Response:
    service.auth.check_csrf(request, csrf)
    service.auth.sign_out(request)
    response = RedirectResponse("/signin", status_code=303)
    response.delete_cookie(COOKIE)
    return response
