"""The study page as the service renders it (in process): buttons only in the states their
action applies to, a refused action said on a page, and the law grid's interrupted budget."""

from __future__ import annotations

import re

import optuna
from inprocess_service import SPEC, inprocess_service
from test_law_status import law_storage

from tuner.app.requests import studies
from tuner.app.service.web.pages.render import STATIC
from tuner.study.store import database as db


def test_a_finished_study_page_hides_cancel_and_resume_and_says_a_refusal(tmp_path):
    with inprocess_service(tmp_path / "root",
                           trainer="inprocess_service:brisk_train") as svc:
        status, _ = svc.call("POST", "/api/v1/studies", {"spec": SPEC.format(name="done", n=2)})
        assert status == 201
        svc.wait_state("done", ("finished",))
        page = svc.client.get("/studies/done")
        assert page.status_code == 200
        html = page.text
        # the page's own style sheet, where the hidden attribute wins over form.inline's rule
        assert '<link rel="stylesheet" href="/assets/moetune.css">' in html
        css = svc.client.get("/assets/moetune.css")
        assert css.status_code == 200 and "[hidden] { display: none !important }" in css.text
        forms = dict(re.findall(r'action="/studies/done/(\w+)"\s+data-when="[^"]*"( hidden)?',
                                html))
        assert forms == {"cancel": " hidden", "resume": " hidden", "delete": ""}
        refused = svc.client.post("/studies/done/cancel", data={"csrf": ""},
                                  follow_redirects=False)
        assert refused.status_code == 409
        assert refused.headers["content-type"].startswith("text/html")
        assert 'class="err"' in refused.text and 'href="/studies/done"' in refused.text
        assert '{"detail"' not in refused.text


STUDY_JS = (STATIC / "study.js").read_text()
LIST_JS = (STATIC / "studies.js").read_text()


def test_the_page_script_renders_code_marks_sorts_names_numerically_and_compacts_ticks():
    # the ties sentence's `noise_repeats = 2` becomes <code>, not raw backticks
    assert "innerHTML=d.knee_ties?inline(d.knee_ties.sentence)" in STUDY_JS
    assert "replace(/`([^`]+)`/g,'<code>$1</code>')" in STUDY_JS
    # t49152 < t147456 < t2621440, not as text
    assert "localeCompare(b.name,'en',{numeric:true})" in LIST_JS
    # 5930000 as 5.93M: a label that fits left of the axis
    assert "toPrecision(3)+'M'" in STUDY_JS
    # one objective: no empty Pareto panel
    assert "getElementById('frontbox').hidden=o.length<2" in STUDY_JS


def test_a_law_run_from_the_command_line_shows_its_stopped_budget_as_interrupted(tmp_path):
    root = law_storage(tmp_path / "runs")
    study = optuna.load_study(study_name="law", storage=db.storage_url(root / "law"))
    grid = studies.detail(study)["law"]
    assert [b["state"] for b in grid["budgets"]] == [
        "done", "done", "waiting", "waiting", "interrupted"]
    assert grid["answer"] == "law law: no full-run answer yet (law.md says why)."  # 2 trials each


def test_a_study_run_from_the_command_line_says_why_it_has_no_owner(tmp_path):
    with inprocess_service(tmp_path / "root") as svc:
        optuna.create_study(study_name="from-cli", storage=svc.service.config.storage_url)
        page = svc.client.get("/studies/from-cli")
        assert page.status_code == 200
        assert 'owner <b>-</b> · state <b id="state">external</b> (' in page.text
        assert "run by `moetune submit` without --server" in page.text
        listing = svc.client.get("/")  # the list's script says it on hover
        assert 'data-external="run by `moetune submit` without --server' in listing.text
    assert "const EXTERNAL=" in LIST_JS and ">command line</i>" in LIST_JS


def test_the_export_form_offers_every_registered_format(tmp_path):
    from tuner.export.formats import FORMATS

    with inprocess_service(tmp_path / "root") as svc:
        optuna.create_study(study_name="s", storage=svc.service.config.storage_url)
        offered = re.findall(r"<option>([^<]+)</option>", svc.client.get("/studies/s").text)
    assert offered == list(FORMATS) and "torchtitan-toml" in offered
