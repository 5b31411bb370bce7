"""Headers every response of the service carries, so a page of ours cannot be framed by
another site (clickjacking) or sniffed into another type; our own pages run only the script
and style files they are served with (no inline script or style) and talk only to this service;
a study's report runs only its own inline script and style, talking to nobody.

A plain ASGI middleware (like `body_limit.BodyLimit`): it adds the headers when the response
starts, with no task or stream per request. The full Content-Security-Policy goes on the pages
moetune renders (`PAGE_PATHS`) and a stricter one on a study's report (`REPORT_CSP`);
Optuna's dashboard, mounted at the root, gets only the frame and type headers (its bundle is
its own business).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

ALWAYS = ((b"x-frame-options", b"DENY"), (b"x-content-type-options", b"nosniff"),
          (b"referrer-policy", b"same-origin"))
# the pages' script and style are files of ours (`/assets`): no inline script or style runs
PAGE_CSP = (b"content-security-policy",
            b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            b"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
PAGE_PATHS = ("/", "/submit", "/signin", "/signout", "/studies/")
# a study's report.html (`reports.html`): plotly.js inline and nothing else; it may load
# nothing and send nothing anywhere. plotly.js's default bundle builds functions at run time,
# hence 'unsafe-eval' (its "strict" bundle is the one built without)
REPORT_CSP = (b"content-security-policy",
              b"default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src "
              b"'unsafe-inline'; img-src data: blob:; font-src data:; base-uri 'none'; "
              b"form-action 'none'; frame-ancestors 'none'")


def is_page(path: str) -> bool:
    return path in PAGE_PATHS or path.startswith("/studies/")


def is_report(path: str) -> bool:
    return path.startswith("/api/v1/studies/") and path.endswith("/report")


class SecurityHeaders:
    """ASGI middleware adding `ALWAYS` to every response and `PAGE_CSP` to our pages."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        extra = ((*ALWAYS, PAGE_CSP) if is_page(path) else
                 (*ALWAYS, REPORT_CSP) if is_report(path) else ALWAYS)

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, with_headers)
