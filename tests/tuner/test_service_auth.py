"""Who may do what on the service: tokens for the API, a signed session with CSRF-checked forms
for the browser; any user reads, only the owner or an admin changes a study. In process
(`inprocess_service`); a real browser against a real `moetune serve` is in
test_service_browser.py."""

from __future__ import annotations

import re
import urllib.parse

import pytest
from inprocess_service import SPEC, InProcessService, inprocess_service
from service_spec import create_team_tokens


@pytest.fixture(scope="module")
def team(tmp_path_factory):
    root = tmp_path_factory.mktemp("team") / "root"
    tokens = create_team_tokens(root)
    with inprocess_service(root) as srv:  # the tokens made above: not open
        yield srv, tokens


def test_tokens_are_stored_hashed(team):
    srv, tokens = team
    db = (srv.root / "service.db").read_bytes()
    assert all(t.encode() not in db for t in tokens.values())


def test_no_or_unknown_token_is_401(team):
    srv, _ = team
    assert srv.call("GET", "/api/v1/studies")[0] == 401
    assert srv.call("GET", "/api/v1/studies", token="not-a-token")[0] == 401
    assert srv.call("GET", "/dashboard")[0] == 401  # the dashboard sits behind the same sign-in
    assert srv.call("GET", "/api/studies")[0] == 401


def test_only_the_owner_or_an_admin_changes_a_study(team):
    srv, tokens = team
    status, body = srv.call("POST", "/api/v1/studies", {"spec": SPEC.format(name="alices", n=4)},
                            token=tokens["alice"])
    assert status == 201 and body["owner"] == "alice"
    assert srv.call("GET", "/api/v1/studies/alices", token=tokens["bob"])[0] == 200  # reads
    status, out = srv.call("POST", "/api/v1/studies/alices/cancel", token=tokens["bob"])
    assert status == 403 and "owner ('alice')" in out["detail"]
    assert srv.call("DELETE", "/api/v1/studies/alices", token=tokens["bob"])[0] == 403
    status, out = srv.call("POST", "/api/v1/studies/alices/cancel", token=tokens["ops"])
    assert status == 200, out  # an admin may
    srv.wait_state("alices", ("cancelled",), token=tokens["alice"])
    assert srv.call("POST", "/api/v1/studies/alices/resume", token=tokens["bob"])[0] == 403
    assert srv.call("DELETE", "/api/v1/studies/alices", token=tokens["alice"])[0] == 204


class Browser:
    """Form posts and a cookie, as a browser sends them (redirects not followed)."""

    def __init__(self, service: InProcessService) -> None:
        self.client = service.client
        self.cookie = ""

    def request(self, method: str, path: str, form: dict[str, str] | None = None
                ) -> tuple[int, str, dict[str, str]]:
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        headers = {"Content-Type": "application/x-www-form-urlencoded"} if form is not None \
            else {}
        if self.cookie:
            headers["Cookie"] = self.cookie
        self.client.cookies.clear()  # only the cookie this browser holds is sent
        r = self.client.request(method, path, content=data, headers=headers,
                                follow_redirects=False)
        return r.status_code, r.text, dict(r.headers)


def test_browser_sign_in_session_and_csrf(team):
    srv, tokens = team
    b = Browser(srv)
    status, _, headers = b.request("GET", "/")
    assert status == 303 and headers["location"] == "/signin"
    assert b.request("POST", "/signin", {"token": "wrong"})[0] == 401
    status, _, headers = b.request("POST", "/signin", {"token": tokens["bob"]})
    cookie = headers["set-cookie"]
    assert status == 303 and "HttpOnly" in cookie and "SameSite=strict" in cookie
    b.cookie = cookie.split(";")[0]
    status, page, _ = b.request("GET", "/submit")
    assert status == 200 and "sign out (bob)" in page
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page).group(1)
    spec = SPEC.format(name="bobs", n=2)
    status, _, _ = b.request("POST", "/submit", {"spec": spec})  # a forged form: no CSRF token
    assert status == 403
    assert srv.call("GET", "/api/v1/studies/bobs", token=tokens["bob"])[0] == 404  # nothing made
    status, page, _ = b.request("POST", "/submit", {"spec": "[study]\nname = 3\n",
                                                    "csrf": csrf})
    assert status == 422 and 'data-field="study.name"' in page  # the error next to the field
    said = re.search(r"<b>study\.name</b>: ([^<]*)</p>", page).group(1)
    assert said.startswith("must be") and "study.name" not in said  # the field named once
    assert page.index('name="name"') < page.index('id="error"') < page.index("<textarea")
    status, page, _ = b.request("POST", "/submit", {
        "spec": "[study]\nname = 'x'\n[model]\npreset = 'nope'\n", "csrf": csrf})
    assert status == 422 and 'data-field="model.preset"' in page
    said = re.search(r"<b>model\.preset</b>: ([^<]*)</p>", page).group(1)
    assert "model.preset" not in said
    # beside the spec it names: after the name's input, right before the spec's text area
    assert page.index('name="name"') < page.index('id="error"') < page.index("<textarea")
    assert re.search(r'id="error"[^>]*>.*?</p>\s*<div class="field-error">\s*<textarea', page)
    status, _, headers = b.request("POST", "/submit", {"spec": spec, "csrf": csrf})
    assert status == 303 and headers["location"] == "/studies/bobs"
    status, page, _ = b.request("GET", "/studies/bobs")
    assert status == 200 and "owner <b>bob</b>" in page
    # the buttons of the state it is in: a queued or running study can only be cancelled
    shown = re.findall(r'action="/studies/bobs/(\w+)"\s+data-when="[^"]*">', page)
    hidden = re.findall(r'action="/studies/bobs/(\w+)"\s+data-when="[^"]*" hidden>', page)
    assert shown == ["cancel"] and sorted(hidden) == ["delete", "resume"], (shown, hidden)
    other = Browser(srv)
    other.cookie = b.cookie.replace(b.cookie[-6:], "000000")  # tampered signature
    assert other.request("GET", "/submit")[0] == 303
