"""report.html in a real headless Chromium: renders every figure, no console error, no network."""

from __future__ import annotations

import pytest
from browser import check_page, find_browser
from synthetic_studies import add, new_study, random_study

import reports

pytestmark = pytest.mark.skipif(
    find_browser() is None,
    reason="no Chromium on PATH (Debian: apt-get install -y chromium); .ci/run installs it")


def test_report_renders_offline_without_console_errors(tmp_path) -> None:
    study = random_study(n=30)
    paths = reports.build(study, tmp_path)
    html = paths["report_html"].read_text()
    n_figures = html.count('class="plotly-graph-div"')
    check = check_page(paths["report_html"], screenshot=tmp_path / "shot.png")
    assert check.errors == []
    assert check.remote_requests == []
    assert check.requests and check.requests[0].startswith("file:")  # requests were recorded
    assert n_figures >= 5 and check.n_plots == n_figures  # every figure drew an SVG
    assert (tmp_path / "shot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_edge_case_reports_render_too(tmp_path) -> None:
    study = new_study()
    add(study, state="fail", reason="out of memory")
    paths = reports.build(study, tmp_path)
    check = check_page(paths["report_html"])
    assert check.errors == [] and check.remote_requests == []


def test_checker_catches_console_errors_and_remote_requests(tmp_path) -> None:
    # The negative control: a page that does what a broken report would do.
    page = tmp_path / "bad.html"
    page.write_text("<!DOCTYPE html><html><head>"
                    "<script src='https://cdn.plot.ly/plotly-2.0.0.min.js'></script></head>"
                    "<body><script>console.error('boom'); undefinedFunction();</script>"
                    "</body></html>")
    check = check_page(page, settle_s=0.5)
    assert any("boom" in e for e in check.errors)
    assert any("undefinedFunction" in e for e in check.errors)
    assert any(u.startswith("https://cdn.plot.ly/") for u in check.remote_requests)
