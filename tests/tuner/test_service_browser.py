"""The service's page in a real browser (headless Chromium) against a real `moetune serve`:
sign in, submit, watch progress live, export, cancel; the law grid and the ladder's rungs drawn.
The integration tier: the same sign-in, session and CSRF rules run in process in
test_service_auth.py."""

from __future__ import annotations

import json

import pytest
from browser import Browser as BrowserSession
from browser import find_browser
from service_process import SPEC, Server
from service_spec import create_team_tokens

from tests.utils.waiting import wait_until


@pytest.fixture(scope="module")
def team(tmp_path_factory):
    root = tmp_path_factory.mktemp("team") / "root"
    tokens = create_team_tokens(root)
    srv = Server(root).start()
    yield srv, tokens
    srv.stop()


def _budget(i: int, tokens: int, state: str, lr: float | None) -> dict:
    optimum = None if lr is None else {"lr": lr, "lr_interval": [lr / 2, lr * 2], "batch": 256.0,
                                       "batch_placed": False, "at_edge": []}
    return {"index": i, "tokens": tokens, "state": state, "held_out": i == 2, "done": 6,
            "total": 6, "running": 0, "optimum": optimum, "error": "",
            "best": None if lr is None else {"lr": lr * 1.3, "loss": 2.5}, "in_lr_law": True,
            "in_batch_law": False}


# a law grid as `tuner.app.requests.law_grid` sends it: two budgets placed, the held-out waiting;
# a pooled lr law that left budget 0 out (one power law did not hold with it)
LAW_VIEW = {"law": {
    "variable": "tokens", "lr_law": {"coef": 0.1, "exponent": -0.2,
                                     "exponent_interval": [-0.3, -0.1]},
    "lr_method": "pooled", "lack_of_fit_p": 0.3,
    "answer": "law lw: full run (deepseek-v3-671b, 1.48e+13 tokens): the law does not pin the LR",
    "batch_law": None, "predicted": {"lr": 0.004, "lr_band": [0.003, 0.006]},
    "held_out_check": {"tokens": 65536, "lr_predicted": 0.004, "lr_measured": 0.0042,
                       "lr_ratio": 0.95, "lr_inside": True, "loss_gap_sd": -0.3,
                       "sd_measured": False},
    "budgets": [_budget(0, 4096, "done", 0.01) | {"in_lr_law": False, "left_out_p": 0.02},
                _budget(1, 13312, "searching", 0.008), _budget(2, 65536, "waiting", None)]}}


# a ladder's rungs as `tuner.app.requests.ladder_rungs` sends them (test_service checks a real one)
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
        # the page's script and style are files the page's policy allows, and nothing of ours
        # broke it; an inline script put in by anyone else does not run
        refused = [p["entry"]["text"] for m, p in b.events if m == "Log.entryAdded"
                   and "Content Security Policy" in p["entry"]["text"]]
        assert refused == []
        assert b.evaluate("getComputedStyle(document.querySelector('nav')).backgroundColor") \
            == "rgb(31, 41, 55)"  # moetune.css applied
        assert b.evaluate("const s = document.createElement('script');"
                          "s.textContent = 'window.__inline = 1';"
                          "document.body.appendChild(s); window.__inline === undefined")
        # the refusal is reported where the check above looked (DevTools events come in
        # with the answers to calls, hence the empty evaluate)
        wait_until(lambda: b.evaluate("0") == 0 and any(
            "Content Security Policy" in p["entry"]["text"] for m, p in b.events
            if m == "Log.entryAdded"), what="the inline script's refusal in the log", timeout=30)
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
        assert b.evaluate("document.getElementById('lawanswer').textContent") == \
            LAW_VIEW["law"]["answer"]  # the answer, first
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
