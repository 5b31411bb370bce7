"""Who may do what on the service: tokens for the API, a signed session with CSRF-checked forms
for the browser; any user reads, only the owner or an admin changes a study."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request

import pytest
from browser import Browser as BrowserSession
from browser import find_browser
from service_process import SPEC, Server

from tuner.app.cli import main


@pytest.fixture(scope="module")
def team(tmp_path_factory):
    root = tmp_path_factory.mktemp("team") / "root"
    tokens = {}
    for user, admin in (("alice", False), ("bob", False), ("ops", True)):
        argv = ["token", "create", user, "--root", str(root)] + (["--admin"] if admin else [])
        import contextlib
        import io

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(argv) == 0
        tokens[user] = out.getvalue().strip()
    srv = Server(root).start()
    yield srv, tokens
    srv.stop()


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

    def __init__(self, url: str) -> None:
        self.url = url
        self.cookie = ""

    def request(self, method: str, path: str, form: dict[str, str] | None = None
                ) -> tuple[int, str, dict[str, str]]:
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if form is not None:
            req.add_header("Content-Type", "application/x-www-form-urlencoded")
        if self.cookie:
            req.add_header("Cookie", self.cookie)
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            with opener.open(req, timeout=60) as r:
                return r.status, r.read().decode(), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(), dict(e.headers)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        return None


def test_browser_sign_in_session_and_csrf(team):
    srv, tokens = team
    b = Browser(srv.url)
    status, _, headers = b.request("GET", "/")
    assert status == 303 and headers["location"] == "/signin"
    assert b.request("POST", "/signin", {"token": "wrong"})[0] == 401
    status, _, headers = b.request("POST", "/signin", {"token": tokens["bob"]})
    cookie = headers["set-cookie"]
    assert status == 303 and "HttpOnly" in cookie and "SameSite=strict" in cookie
    b.cookie = cookie.split(";")[0]
    status, page, _ = b.request("GET", "/submit")
    assert status == 200 and "sign out (bob)" in page
    csrf = re.search(r"name='csrf' value='([0-9a-f]+)'", page).group(1)
    spec = SPEC.format(name="bobs", n=2)
    status, _, _ = b.request("POST", "/submit", {"spec": spec})  # a forged form: no CSRF token
    assert status == 403
    assert srv.call("GET", "/api/v1/studies/bobs", token=tokens["bob"])[0] == 404  # nothing made
    status, page, _ = b.request("POST", "/submit", {"spec": "[study]\nname = 3\n",
                                                    "csrf": csrf})
    assert status == 422 and "data-field='study.name'" in page  # the error next to the field
    said = re.search(r"<b>study\.name</b>: ([^<]*)</p>", page).group(1)
    assert said.startswith("must be") and "study.name" not in said  # the field named once
    assert page.index("name='name'") < page.index("id='error'") < page.index("<textarea")
    status, page, _ = b.request("POST", "/submit", {
        "spec": "[study]\nname = 'x'\n[model]\npreset = 'nope'\n", "csrf": csrf})
    assert status == 422 and "data-field='model.preset'" in page
    said = re.search(r"<b>model\.preset</b>: ([^<]*)</p>", page).group(1)
    assert "model.preset" not in said
    # beside the spec it names: after the name's input, right before the spec's text area
    assert page.index("name='name'") < page.index("id='error'") < page.index("<textarea")
    assert re.search(r"id='error'[^>]*>.*?</p><div class=' field-error'><textarea", page)
    status, _, headers = b.request("POST", "/submit", {"spec": spec, "csrf": csrf})
    assert status == 303 and headers["location"] == "/studies/bobs"
    status, page, _ = b.request("GET", "/studies/bobs")
    assert status == 200 and "owner <b>bob</b>" in page
    # the buttons of the state it is in: a queued or running study can only be cancelled
    shown = re.findall(r"action='/studies/bobs/(\w+)' data-when='[^']*'>", page)
    hidden = re.findall(r"action='/studies/bobs/(\w+)' data-when='[^']*' hidden>", page)
    assert shown == ["cancel"] and sorted(hidden) == ["delete", "resume"], (shown, hidden)
    other = Browser(srv.url)
    other.cookie = b.cookie.replace(b.cookie[-6:], "000000")  # tampered signature
    assert other.request("GET", "/submit")[0] == 303


def _budget(i: int, tokens: int, state: str, lr: float | None) -> dict:
    optimum = None if lr is None else {"lr": lr, "lr_interval": [lr / 2, lr * 2], "batch": 256.0,
                                       "batch_placed": False, "at_edge": []}
    return {"index": i, "tokens": tokens, "state": state, "held_out": i == 2, "done": 6,
            "total": 6, "running": 0, "optimum": optimum, "error": "",
            "best": None if lr is None else {"lr": lr * 1.3, "loss": 2.5}, "in_lr_law": True,
            "in_batch_law": False}


# a law grid as `tuner.app.service.law_grid` sends it: two budgets placed, the held-out waiting;
# a pooled lr law that left budget 0 out (one power law did not hold with it)
LAW_VIEW = {"law": {
    "variable": "tokens", "lr_law": {"coef": 0.1, "exponent": -0.2,
                                     "exponent_interval": [-0.3, -0.1]},
    "lr_method": "pooled", "lack_of_fit_p": 0.3,
    "batch_law": None, "predicted": {"lr": 0.004, "lr_band": [0.003, 0.006]},
    "held_out_check": {"tokens": 65536, "lr_predicted": 0.004, "lr_measured": 0.0042,
                       "lr_ratio": 0.95, "lr_inside": True, "loss_gap_sd": -0.3,
                       "sd_measured": False},
    "budgets": [_budget(0, 4096, "done", 0.01) | {"in_lr_law": False, "left_out_p": 0.02},
                _budget(1, 13312, "searching", 0.008), _budget(2, 65536, "waiting", None)]}}


# a ladder's rungs as `tuner.app.service.ladder_rungs` sends them (test_service checks a real one)
LADDER_VIEW = {"ladder": {"rungs": [
    {"rung": 0, "width": 32, "state": "done", "done": 4, "total": 4, "running": 0,
     "best": {"number": 2, "lr": 0.003, "objective": "val_loss", "value": 2.5}},
    {"rung": 1, "width": 64, "state": "searching", "done": 1, "total": 2, "running": 1,
     "best": None},
    {"rung": 2, "width": 128, "state": "waiting", "done": 0, "total": None, "running": 0,
     "best": None}]}}


@pytest.mark.skipif(find_browser() is None, reason="no Chromium on PATH (Debian: apt-get "
                    "install -y chromium); .ci/run installs it")
def test_a_real_browser_signs_in_submits_watches_reports_and_cancels(team, tmp_path):
    srv, tokens = team
    js = json.dumps
    with BrowserSession(size=(1300, 1000)) as b:
        b.goto(f"{srv.url}/signin")
        b.evaluate(f"document.querySelector('input[name=token]').value = {js(tokens['alice'])};"
                   "document.querySelector('form').submit(); true")
        b.wait_for(f"location.href === {js(srv.url + '/')}")
        b.goto(f"{srv.url}/submit")
        b.evaluate(f"document.querySelector('textarea').value = "
                   f"{js(SPEC.format(name='in-browser', n=8))};"
                   "document.querySelector('main form').submit(); true")
        b.wait_for(f"location.href === {js(srv.url + '/studies/in-browser')}")
        b.wait_for("document.readyState === 'complete'")
        b.evaluate("window.__same_page = true")  # gone if the page reloads
        first = b.wait_for("(document.getElementById('progress').textContent.match("
                           "/^(\\d+)\\/8/) || [])[1]")
        b.wait_for(f"Number((document.getElementById('progress').textContent.match("
                   f"/^(\\d+)\\/8/) || [])[1]) > {first}", timeout_s=120)
        assert b.evaluate("window.__same_page === true")  # updated live, not reloaded
        assert b.evaluate("document.querySelectorAll('#trials tbody tr').length") >= 1
        assert b.evaluate("document.querySelectorAll('#front circle').length") >= 1
        # the knee's ties as the reports say them (no noise measured in this study)
        assert "noise was not measured" in b.evaluate(
            "document.getElementById('ties').textContent")
        # the export form, as a user fills it in: the knee as a Megatron command line, saved
        # by the browser as a file (the page stays where it is)
        b.allow_downloads(tmp_path / "downloads")
        b.evaluate("const f = [...document.querySelectorAll('form')].find(f => "
                   "f.action.endsWith('/export'));"
                   "f.querySelector('select[name=format]').value = 'megatron';"
                   "f.querySelector('button').click(); true")
        name = b.wait_download()
        assert name == "in-browser-megatron.args"
        saved = (tmp_path / "downloads" / name).read_text()
        assert "--num-layers 61" in saved and "--num-experts 256" in saved  # DeepSeek-V3 671B
        assert b.evaluate("window.__same_page === true")
        b.screenshot(tmp_path / "study.png")
        b.evaluate("[...document.querySelectorAll('form')].find(f => f.action.endsWith("
                   "'/cancel')).submit(); true")
        b.wait_for("['stopping', 'cancelled'].includes("
                   "document.getElementById('state')?.textContent)")
        # the buttons follow the state; integers print as integers; plots have axes, legends
        b.wait_for("document.getElementById('state').textContent === 'cancelled'",
                   timeout_s=60)
        b.wait_for("[...document.querySelectorAll('form[data-when]')].filter(f => !f.hidden)"
                   ".map(f => f.action.split('/').pop()).join() === 'resume,delete'")
        assert b.evaluate("[fmt(32), fmt(0.0012345678), fmt(null)].join()") == "32,0.001235,-"
        assert b.evaluate("document.querySelectorAll('#front .tick').length") == 6
        assert b.evaluate("document.querySelectorAll('#curves .tick').length") == 6
        assert "Pareto front" in b.evaluate("document.querySelector('#curves .legend')"
                                            ".textContent")
        # no law here: no law grid; a law's grid (the keys test_service's law test checks
        # on a real one) draws every budget, placed or waiting, and the held-out band
        assert b.evaluate("document.getElementById('law').hidden") is True
        b.evaluate(f"law({js(LAW_VIEW)}); true")
        assert b.evaluate("document.getElementById('law').hidden") is False
        rows = b.evaluate("[...document.querySelectorAll('#lawtable tbody tr')]"
                          ".map(r => r.cells[1].textContent).join()")
        assert rows == "done,searching,waiting", rows
        notes = b.evaluate("[...document.querySelectorAll('#lawtable tbody tr')]"
                           ".map(r => r.cells[6].textContent)")
        assert "left out of the lr law" in notes[0] and "p 0.02" in notes[0], notes
        assert notes[1] == "in the pooled lr law", notes
        law_line = b.evaluate("document.querySelector('#lawplot line title').textContent")
        assert "pooled lr law" in law_line and "one power law: p 0.3" in law_line, law_line
        # two optima and their two best-of-n
        assert b.evaluate("document.querySelectorAll('#lawplot circle').length") == 4
        assert b.evaluate("document.querySelectorAll('#lawplot rect[fill=\"#d6272833\"]')"
                          ".length") == 1  # the held-out prediction's band
        assert b.evaluate("document.querySelectorAll('#lawplot .tick').length") == 6
        assert "lr law" in b.evaluate("document.querySelector('#lawplot .legend').textContent")
        held = b.evaluate("document.getElementById('lawheld').textContent")
        assert "measured 0.0042" in held and "noise not measured" in held, held
        assert "inside the predicted band" in held, held
        missed = {**LAW_VIEW["law"], "held_out_check": {
            **LAW_VIEW["law"]["held_out_check"], "lr_measured": 0.012, "lr_inside": False}}
        b.evaluate(f"law({js({'law': missed})}); true")
        held = b.evaluate("document.getElementById('lawheld').textContent")
        assert "measured 0.012" in held and "missed its own check" in held, held
        assert b.evaluate("document.getElementById('ladder').hidden") is True
        b.evaluate(f"ladder({js(LADDER_VIEW)}); true")
        assert b.evaluate("[...document.querySelectorAll('#rungs tbody tr')].map(r => "
                          "r.innerText.split('\\t').slice(0, 3).join(' ')).join('|')") == (
            "32 done 4/4|64 searching 1/2, 1 running|128 waiting 0/?")
        b.goto(f"{srv.url}/api/v1/studies/in-browser/report")
        assert "in-browser" in str(b.evaluate("document.title + document.body.innerText"))
        errors = [p for m, p in b.events if m == "Runtime.exceptionThrown"]
        assert errors == []
    assert (tmp_path / "study.png").read_bytes()[:4] == b"\x89PNG"
