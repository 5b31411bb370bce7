"""The submit action, typed (`tuner.app.requests.submit`): a bad value is refused when the request
is made, naming the field; the command line's file and a service's JSON body give the same spec;
the TOML limits hold on both front ends; what a service submit does not do is refused, not
ignored."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from test_tuner_resume import QT
from test_tuner_resume import SPEC as RESUME_SPEC

from tuner.app.cli import main
from tuner.app.requests.actions import RequestError
from tuner.app.requests.submit import SubmitRequest, read_toml, submitted_spec
from tuner.app.service.access.tokens import User
from tuner.app.service.context import Service, ServiceConfig, SubmitError
from tuner.study.specs.spec import MAX_KEY_PARTS
from tuner.study.store import database as db
from tuner.study.store import storage as st

# the resume tests' two-trial spec, its space in a file beside it (`_files`)
SPEC = RESUME_SPEC.format(n=2).replace('name = "rnd"', 'name = "sub"').split(
    "[space.params.lr]")[0] + '[space]\nfile = "mine.toml"\n'
SPACE = "[params.lr]" + RESUME_SPEC.split("[space.params.lr]")[1]


def _files(tmp_path: Path) -> Path:
    (tmp_path / "mine.toml").write_text(SPACE)
    spec = tmp_path / "sub.toml"
    spec.write_text(SPEC)
    return spec


def _args(spec: Path, **kw: object) -> argparse.Namespace:
    return argparse.Namespace(**({"spec": str(spec), "name": None, "resume": False} | kw))


@pytest.mark.parametrize(("values", "field"), [
    ({"spec": 3}, "spec"),
    ({"spec": "", "name": ""}, "--name"),
    ({"spec": "", "name": "  "}, "--name"),
    ({"spec": "", "name": 7}, "--name"),
    ({"spec": "", "space": ["lr"]}, "space"),
    ({"spec": "", "resume": "yes"}, "--resume"),
])
def test_a_bad_request_is_refused_when_made_naming_the_field(values, field):
    with pytest.raises(RequestError) as e:
        SubmitRequest(**values)
    assert e.value.field == field


def test_the_file_and_the_json_body_give_the_same_spec(tmp_path):
    """The command line reads the space file beside the spec; ``--server`` sends it along in the
    body; the service, which reads no client file, parses the same spec from that body."""
    local = SubmitRequest.from_namespace(_args(_files(tmp_path), name="renamed"))
    body = local.body()
    assert body["space"] == SPACE and body["name"] == "renamed"
    remote = SubmitRequest.from_body(body["spec"], name=body["name"], space=body["space"])
    a, b = submitted_spec(local), submitted_spec(remote)
    assert a.name == b.name == "renamed"
    assert a.space.distributions() == b.space.distributions()
    assert (a.study, a.budget, a.pruning) == (b.study, b.budget, b.pruning)


@pytest.mark.parametrize(("text", "limit", "words"), [
    ("[study\nname = 1", None, ["not valid TOML"]),
    ("x = [" * 2000 + "]" * 2000, None, ["not valid TOML"]),
    ("a" + ".a" * MAX_KEY_PARTS + " = 1", None, ["dotted parts", str(MAX_KEY_PARTS + 1)]),
    ("x = 'é'", 3, ["at most 3 bytes", "got 8"]),  # bytes, not characters
    ("x = '\ud800'", None, ["lone surrogate"]),
])
def test_the_toml_limits(text, limit, words):
    with pytest.raises(RequestError) as e:
        read_toml(text, "spec", origin="my.toml", max_bytes=limit)
    assert e.value.field == "spec"
    assert str(e.value).startswith("my.toml: ")
    assert all(w in str(e.value) for w in words), str(e.value)


def test_a_name_over_a_study_that_is_not_a_table_is_the_specs_error(tmp_path, capsys):
    """``study = 3`` with a name to put in: the parse names [study], no TypeError (the service
    answered 500 and the command line a traceback)."""
    with pytest.raises(RequestError) as e:
        submitted_spec(SubmitRequest(spec="study = 3\n", name="x"))
    assert e.value.field == "study"
    spec = tmp_path / "bad.toml"
    spec.write_text("study = 3\n")
    assert main(["submit", str(spec), "--name", "x", "--root", str(tmp_path / "runs"), *QT]) == 2
    assert "study" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


@pytest.fixture
def service(tmp_path):
    root = tmp_path / "service"
    root.mkdir()
    url = f"sqlite:///{root / 'service.db'}"

    class NoScheduler:
        def wake(self) -> None:
            pass

    return Service(ServiceConfig(root=root, storage_url=url, trainer="tuner.testing:quick_train"),
                   db.open_storage(url), None, NoScheduler())  # type: ignore[arg-type]


def test_a_service_refuses_resume_at_submit_and_creates_nothing(service, tmp_path):
    local = SubmitRequest.from_namespace(_args(_files(tmp_path), resume=True))
    body = local.body()
    with pytest.raises(SubmitError) as e:
        service.submit(SubmitRequest(spec=body["spec"], space=body["space"], resume=True),
                       User(name="ann", admin=False))
    assert e.value.field == "--resume"
    assert service.names() == []
    name = service.submit(SubmitRequest.from_body(body["spec"], space=body["space"]),
                          User(name="ann", admin=False))
    assert name == "sub" and service.names() == ["sub"]


def test_a_service_submit_reads_the_toml_under_its_body_limit(service):
    limit = service.config.max_body_bytes
    with pytest.raises(SubmitError) as e:
        service.submit(SubmitRequest(spec="#" * (limit + 1)), User(name="ann", admin=False))
    assert e.value.field == "spec" and f"at most {limit} bytes" in str(e.value)
    with pytest.raises(SubmitError) as e:
        service.submit(SubmitRequest(spec=SPEC, space="#" * (limit + 1)),
                       User(name="ann", admin=False))
    assert e.value.field == "space"
    assert service.names() == []


@pytest.mark.parametrize("section", [
    "[law]\ntokens = [300, 1_000, 3_000, 10_000]\ntrials = 2\nbudget = 1\n",
    "[ladder]\nwidths = [32, 64]\npromote = 0.5\nrung = 1\n",
], ids=["law-budget", "ladder-rung"])
def test_a_service_queues_one_stage_of_a_law_or_ladder_as_the_one_study_it_is(service, section):
    """A spec that is one stage (``[law] budget = 1``, ``[ladder] rung = 1``) is one study, as
    the command line runs it (`stage_runner.first_stage`, by the spec's kind): the service
    stores that spec, not the whole law or ladder from its first stage, whose later stages'
    names and folders its submit never checked."""
    name = service.submit(SubmitRequest(spec=RESUME_SPEC.format(n=2) + section),
                          User(name="ann", admin=False))
    stored = st.stored_spec(service.study(name))
    assert stored.kind == "study"
    assert (stored.law.budget, stored.ladder.rung) == (
        (1, 0) if section.startswith("[law]") else (0, 1))
    assert sorted(p.name for p in service.config.root.iterdir() if p.is_dir()) == [name]


def test_submit_to_a_server_with_resume_is_refused_before_sending(tmp_path, capsys):
    """Nothing listens on the port: a request sent would fail to connect (exit 1), so exit 2
    with the flag named shows it was refused here."""
    spec = _files(tmp_path)
    assert main(["submit", str(spec), "--resume", "--server", "http://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert "--resume" in err and "moetune resume NAME" in err
    assert main(["submit", str(spec), "--server", "http://127.0.0.1:9"]) == 1  # it would send
