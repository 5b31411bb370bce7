"""The service's export gives the command line's anchored answer (in process): a law study's
offset against a reference law study of the service's storage (``reference``, through the JSON
API, the page's form and ``moetune export --server``), another user's study allowed, a bad one a
422 naming the field; and the operator's team recipes (``serve --recipes``) read first by every
export's prior, as ``moetune export --recipes`` reads them, a request naming a file refused with
what to do instead."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from inprocess_service import SPEC, InProcessService, inprocess_service
from law_pair import write_law

from tuner.app import remote, serve_command
from tuner.app.cli import main
from tuner.app.requests.actions import MESSAGES_HEADER
from tuner.app.requests.errors import UsageError
from tuner.study.store import database as db
from tuner.study.store import records
from tuner.study.store import storage as st

FULL = {"target": "deepseek-v3-671b", "gpus": 2048, "tokens": 14.8e12}
FLAGS = ["--target", "deepseek-v3-671b", "--gpus", "2048", "--tokens", "14.8e12"]
# one team run whose peak LR sits well above what the published recipes' prior says for its
# size, so reading it moves the prior
TEAM_ROW = """
[[recipe]]
name = "ours-7B"
family = "ours"
kind = "dense"
params_total = 7.0e9
params_active = 7.0e9
layers = 32
dim = 4096
vocab = 32000
tied = false
seq_len = 4096
tokens = 2.0e12
batch_start = 4194304
batch_end = 4194304
ramp_tokens = 0
lr = 1.5e-3
warmup = "2000 steps"
schedule = "cosine to 10%"
weight_decay = 0.1
optimizer = "adamw"
parametrization = "standard"
source = "our run 2026-03"
"""


def _owned_by(store, name: str, owner: str) -> None:
    """``name`` (a law's first budget) as a finished study of ``owner`` on the service."""
    study = st.load_study(name, store)
    study.set_user_attr(records.SERVICE, {"owner": owner, "state": "finished",
                                          "submitted_at": "", "error": ""})


@pytest.fixture(scope="module")
def laws(tmp_path_factory):
    """alice's law study ``team`` (lr* twice the reference's), bob's ``ref``, and a plain
    study ``plain``, on a service with tokens for both."""
    with inprocess_service(tmp_path_factory.mktemp("laws") / "root",
                           trainer="inprocess_service:brisk_train",
                           users=(("alice", False), ("bob", False))) as svc:
        store = db.open_storage(svc.storage_url)
        write_law(store, "team", 2.0)
        write_law(store, "ref", 1.0)
        _owned_by(store, "team", "alice")
        _owned_by(store, "ref", "bob")
        status, body = svc.call("POST", "/api/v1/studies", {"spec": SPEC.format(name="plain",
                                                                                n=2)},
                                token=svc.tokens["bob"])
        assert status == 201, body
        svc.wait_state("plain", ("finished",), token=svc.tokens["bob"])
        yield svc


def _export(svc: InProcessService, name: str, token: str = "", **options) -> tuple[int, str]:
    r = svc.client.post(f"/api/v1/studies/{name}/export", json=FULL | options,
                        headers={"Authorization": f"Bearer {token}"} if token else {})
    return r.status_code, r.text


def _local(svc: InProcessService, name: str, out: Path, *extra: str) -> str:
    argv = ["export", name, "--root", str(svc.root), "--storage", svc.storage_url, *FLAGS,
            "--out", str(out), *extra]
    assert main(argv) == 0
    return out.read_text()


def test_a_reference_through_the_json_api_moves_the_prior_as_the_command_line_does(
        laws, tmp_path):
    status, text = _export(laws, "team", laws.tokens["alice"], reference="ref")
    assert status == 200, text
    offset = json.loads(text)["lr"]["answer"]["offset"]
    assert offset["applied"] and offset["factor"] == pytest.approx(2.0, rel=0.1)
    # bob's study is alice's reference: read access is open to every signed-in user
    assert text == _local(laws, "team", tmp_path / "local.json", "--reference", "ref")


@pytest.mark.parametrize(("reference", "words"), [
    ("nosuch", "no study 'nosuch' in the study's storage"),
    ("plain", "the reference must be a law study"),
    ("../ref", "must be a study's name"),
    ("", "must be a study's name"),
    (7, "must be a study's name"),
])
def test_a_bad_reference_is_a_422_naming_the_field(laws, reference, words):
    status, text = _export(laws, "team", laws.tokens["alice"], reference=reference)
    body = json.loads(text)
    assert status == 422 and body["field"] == "--reference", body
    assert body["detail"].startswith("--reference: ") and words in body["detail"], body


def test_a_reference_for_a_study_that_is_no_law_is_a_422_naming_the_field(laws):
    status, text = _export(laws, "plain", laws.tokens["bob"], reference="ref")
    body = json.loads(text)
    assert status == 422 and body["field"] == "--reference"
    assert "the study must be a law study" in body["detail"], body


def _through_the_app(monkeypatch, svc: InProcessService, token: str) -> list[dict]:
    """``--server``'s client sends its requests to ``svc``'s app (a 4xx raises as the real
    client's does); returns the bodies it sent."""
    sent: list[dict] = []

    def response(self, method, path, body=None):
        sent.append(body)
        r = svc.client.request(method, path, content=json.dumps(body).encode(),
                               headers={"Content-Type": "application/json",
                                        "Authorization": f"Bearer {token}"})
        if 400 <= r.status_code < 500:
            raise UsageError(r.json()["detail"])
        assert r.status_code == 200, r.text
        return r.content, r.headers.get("content-type", ""), r.headers

    monkeypatch.setattr(remote.Client, "response", response)
    return sent


def test_a_reference_through_the_command_lines_server_path(laws, tmp_path, monkeypatch,
                                                           capsys):
    sent = _through_the_app(monkeypatch, laws, laws.tokens["alice"])
    out = tmp_path / "remote.json"
    assert main(["export", "team", "--server", laws.url, *FLAGS, "--reference", "ref",
                 "--out", str(out)]) == 0
    assert sent[-1]["reference"] == "ref"
    assert out.read_text() == _local(laws, "team", tmp_path / "local.json", "--reference", "ref")
    capsys.readouterr()
    assert main(["export", "team", "--server", laws.url, *FLAGS, "--reference", "nosuch",
                 "--out", str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err
    assert "moetune export: error: --reference: no study 'nosuch'" in err
    assert "Traceback" not in err and not (tmp_path / "bad.json").exists()


def test_the_export_form_takes_a_reference_and_empty_is_none(laws):
    laws.client.cookies.clear()
    signed_in = laws.client.post("/signin", data={"token": laws.tokens["alice"]},
                                 follow_redirects=False)
    assert signed_in.status_code == 303
    page = laws.client.get("/studies/team").text
    assert '<input name="reference" value=""' in page
    form = {"csrf": re.search(r'name="csrf" value="([0-9a-f]+)"', page).group(1),
            "pick": "knee", "target": "deepseek-v3-671b", "hardware": "h800", "gpus": "2048",
            "tokens": "14.8e12", "format": "native"}
    moved = laws.client.post("/studies/team/export", data=form | {"reference": "ref"})
    none = laws.client.post("/studies/team/export", data=form | {"reference": " "})
    laws.client.cookies.clear()
    assert moved.status_code == 200 and none.status_code == 200, (moved.text, none.text)
    assert json.loads(moved.text)["lr"]["answer"]["offset"]["applied"]
    assert json.loads(none.text)["lr"]["answer"]["offset"] is None


# -- the team's own recipes ------------------------------------------------------------------


@pytest.fixture(scope="module")
def recipes_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("recipes") / "ours.toml"
    path.write_text(TEAM_ROW)
    return path


@pytest.fixture(scope="module")
def with_recipes(tmp_path_factory, recipes_file):
    """A service started with ``serve --recipes``, one plain study finished on it."""
    with inprocess_service(tmp_path_factory.mktemp("recipes") / "root",
                           trainer="inprocess_service:brisk_train",
                           recipes=recipes_file) as svc:
        status, body = svc.call("POST", "/api/v1/studies", {"spec": SPEC.format(name="s", n=2)})
        assert status == 201, body
        svc.wait_state("s", ("finished",))
        yield svc


def test_serve_recipes_moves_every_exports_prior_as_export_recipes_does(
        with_recipes, recipes_file, tmp_path, monkeypatch):
    svc = with_recipes
    r = svc.client.post("/api/v1/studies/s/export", json=FULL)
    assert r.status_code == 200, r.text
    said = json.loads(r.headers[MESSAGES_HEADER])
    assert ("prior: the published recipes and the team's own runs, read first: ours-7B"
            in said)
    # the one answer: what the command line writes for the same study with the same recipes
    assert r.text == _local(svc, "s", tmp_path / "local.json", "--recipes", str(recipes_file))
    ours = json.loads(r.text)["lr"]
    # the same service started without them answers with the published recipes alone
    monkeypatch.setattr(svc.service, "config",
                        dataclasses.replace(svc.service.config, recipes=None))
    alone = svc.client.post("/api/v1/studies/s/export", json=FULL)
    assert alone.status_code == 200, alone.text
    theirs = json.loads(alone.text)["lr"]
    assert ours["lr"] != pytest.approx(theirs["lr"], rel=0.01)  # the prior moved
    # the team's row is counted in the prior the file names (its `# LR:` line says the same)
    assert ours["answer"]["prior"]["rows"] == theirs["answer"]["prior"]["rows"] + 1
    assert ours["answer"]["prior"]["team_offset_decades"] != 0
    assert not any(line.startswith("prior:")
                   for line in json.loads(alone.headers[MESSAGES_HEADER]))
    megatron = svc.client.post("/api/v1/studies/s/export", json=FULL | {"format": "megatron"})
    lr_line = next(x for x in megatron.text.splitlines() if x.startswith("# LR:"))
    assert f"{ours['answer']['prior']['rows']} AdamW recipes" not in lr_line  # without them
    monkeypatch.undo()
    megatron = svc.client.post("/api/v1/studies/s/export", json=FULL | {"format": "megatron"})
    lr_line = next(x for x in megatron.text.splitlines() if x.startswith("# LR:"))
    assert (f"{ours['answer']['prior']['rows']} AdamW recipes" in lr_line
            and "by the team's own runs" in lr_line)


def test_a_request_naming_a_recipes_file_is_refused_saying_what_to_do(with_recipes):
    r = with_recipes.client.post("/api/v1/studies/s/export",
                                 json=FULL | {"recipes": "/tmp/ours.toml"})
    body = r.json()
    assert r.status_code == 422 and body["field"] == "--recipes", body
    assert "serve --recipes FILE" in body["detail"] and "'/tmp/ours.toml'" in body["detail"]


def test_export_server_recipes_is_refused_before_sending(with_recipes, recipes_file, tmp_path,
                                                        monkeypatch, capsys):
    sent = _through_the_app(monkeypatch, with_recipes, "")
    out = tmp_path / "x.json"
    assert main(["export", "s", "--server", with_recipes.url, *FLAGS, "--recipes",
                 str(recipes_file), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("moetune export: error: --recipes: not an option of the service's")
    assert "serve --recipes FILE" in err and "Traceback" not in err
    assert not sent and not out.exists()


def test_serve_with_a_bad_recipes_file_exits_2_naming_the_row_and_starts_nothing(
        tmp_path, monkeypatch, capsys):
    bad = tmp_path / "ours.toml"
    bad.write_text(TEAM_ROW.replace("lr = 1.5e-3", "lr = 15"))

    def started(*args, **kwargs):
        raise AssertionError("serve went past its checks")

    monkeypatch.setattr(serve_command, "_private_root", started)
    root = tmp_path / "root"
    assert main(["serve", "--root", str(root), "--port", "0", "--recipes", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("moetune serve: error: --recipes: recipe[0].lr (ours-7B, ")
    assert "must be a peak LR in [1e-06, 0.1]" in err and "but got 15" in err
    assert "Traceback" not in err and not root.exists()
