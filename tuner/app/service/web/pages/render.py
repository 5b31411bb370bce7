"""What every page shares: its templates, the layout's values (the user, the CSRF token) and the
signed-in check that sends a visitor without a session to the sign-in page."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from tuner.app.service.access.tokens import User
from tuner.app.service.context import Service
from tuner.app.service.web.api.deps import ServiceDep

HERE = Path(__file__).parent
STATIC = HERE / "static"  # served at /assets (`main.create_app`)
# autoescaped: every value a template prints is HTML-escaped unless marked safe (none is)
TEMPLATES = Jinja2Templates(directory=HERE / "templates")


class SignInFirst(Exception):
    """A page asked for without a session (or token) while the service requires one."""


async def to_signin(request: Request, exc: Exception) -> Response:
    """`SignInFirst`'s answer: the sign-in page."""
    return RedirectResponse("/signin", status_code=303)


def page_user(request: Request, service: ServiceDep) -> User:
    """The signed-in user of a page request; `SignInFirst` for none (a 401 of the API)."""
    try:
        return service.auth.user(request)
    except HTTPException as e:
        if e.status_code == 401:
            raise SignInFirst from None
        raise


PageUser = Annotated[User, Depends(page_user)]


def page(request: Request, service: Service, template: str, title: str, who: User | None,
         status_code: int = 200, **values: Any) -> HTMLResponse:
    """``template`` rendered in the layout, titled ``title``; the sign-out button for a signed-in
    user of a service that requires sign-in."""
    return TEMPLATES.TemplateResponse(
        request, template, status_code=status_code,
        context={"title": title, "who": who, "csrf": service.auth.csrf_token(request),
                 "signed_in": who is not None and service.auth.required(), **values})
