"""The typed requests both front ends build (`tuner.app.requests.actions`): a bad value is refused
when the request is made, with the field named, whether it came from the command line's flags or a
service's JSON body; the format registry names every file an export writes; the ``--server`` client
dispatches from its table."""

from __future__ import annotations

import argparse
import json

import pytest

from trainers.presets import PUBLISHED_CONFIGS
from tuner.app import remote
from tuner.app.cli import build_parser, main
from tuner.app.requests.actions import (
    CancelRequest,
    DeleteRequest,
    ExportRequest,
    RequestError,
    ResumeRequest,
)
from tuner.export import formats

TARGET = str(PUBLISHED_CONFIGS / "config_16B.json")
GOOD = {"target": TARGET, "gpus": 64, "tokens": 1e12}


@pytest.mark.parametrize(("options", "field", "words"), [
    ({"gpus": "many"}, "--gpus", ["integer", "'many'"]),
    ({"gpus": True}, "--gpus", ["integer", "True"]),
    ({"gpus": 0}, "--gpus", ["positive integer"]),
    ({"gpus": 2**30}, "--gpus", ["at most"]),
    ({"tokens": "lots"}, "--tokens", ["number"]),
    ({"tokens": "nan"}, "--tokens", ["positive whole number"]),
    ({"mfu": 2.0}, "--mfu", ["(0, 1]"]),
    ({"seq_len": [1, 2]}, "--seq-len", ["integer"]),
    ({"format": "yaml"}, "--format", ["unknown name 'yaml'", "megatron"]),
    ({"hardware": "tpu"}, "--hardware", ["unknown name 'tpu'", "h800"]),
    ({"pick": "trial x"}, "--pick", ["one trial number"]),
    ({"pick": "worst"}, "--pick", ["must be one of"]),
    ({"pick": {"a": 1}}, "--pick", ["must be one of"]),
    ({"target": ""}, "--target", ["must name"]),
    ({"target": 7}, "--target", ["text"]),
    ({"root": "/"}, "--root", ["not an option of the service's export"]),
    ({"storage": "sqlite:///x.db"}, "--storage", ["service owns its storage"]),
    ({"out": "x.json"}, "--out", ["not an option"]),
    ({"colour": "red"}, "--colour", ["not an option of export"]),
    ({"lr": -1e-4}, "--lr", ["positive number"]),
    ({"lr": "fast"}, "--lr", ["number"]),
    ({"lr_at_fitted_batch": "yes"}, "--lr-at-fitted-batch", ["true or false"]),
    ({"lr_wide_band": "yes"}, "--lr-wide-band", ["true or false"]),
    ({"a b": 1}, "export", ["unknown option"]),
])
def test_a_json_export_request_names_the_bad_field(options, field, words):
    with pytest.raises(RequestError) as e:
        ExportRequest.from_options("s", GOOD | options)
    assert e.value.field == field
    for w in words:
        assert w in str(e.value)


@pytest.mark.parametrize("missing", ["target", "gpus", "tokens"])
def test_a_json_export_request_without_a_required_option_names_it(missing):
    options = {k: v for k, v in GOOD.items() if k != missing}
    with pytest.raises(RequestError) as e:
        ExportRequest.from_options("s", options)
    assert e.value.field == f"--{missing}" and "required" in str(e.value)


def test_a_form_sends_text_and_gets_the_same_request_as_json():
    form = ExportRequest.from_options("s", {"pick": "trial 3", "target": TARGET,
                                            "gpus": "64", "tokens": "1e12", "seq_len": " 2048 "})
    json_body = ExportRequest.from_options("s", {"pick": ["trial", 3], "target": TARGET,
                                                 "gpus": 64, "tokens": 1e12, "seq_len": 2048})
    assert form == json_body and form.pick_rule().trial == 3
    # what the --server client sends reads back as the same request
    assert ExportRequest.from_options("s", form.options()) == form


def _export_args(*extra: str) -> argparse.Namespace:
    return build_parser().parse_args(["export", "s", "--target", TARGET, "--gpus", "64",
                                      "--tokens", "1e12", *extra])


@pytest.mark.parametrize(("extra", "field"), [
    (["--gpus", "0"], "--gpus"),
    (["--format", "yaml"], "--format"),
    (["--pick", "trial", "x"], "--pick"),
    (["--pick", "knee", "best-loss"], "--pick"),
    (["--hardware", "tpu"], "--hardware"),
    (["--memory-fraction", "1.5"], "--memory-fraction"),
])
def test_a_command_line_export_request_names_the_bad_field(extra, field):
    with pytest.raises(RequestError) as e:
        ExportRequest.from_namespace(_export_args(*extra))
    assert e.value.field == field and str(e.value).startswith(field)


def test_the_command_line_and_json_build_the_same_export_request():
    args = _export_args("--pick", "knee", "--format", "hf", "--tp", "2")
    assert ExportRequest.from_namespace(args) == ExportRequest.from_options(
        "s", GOOD | {"pick": "knee", "format": "hf", "tp": 2})


@pytest.mark.parametrize("name", ["", "  ", "../etc", "a/b", "..", "a\\b"])
def test_cancel_and_delete_requests_refuse_a_name_that_is_a_path(name):
    for make in (lambda: CancelRequest(study=name, by="alice"),
                 lambda: DeleteRequest(study=name), lambda: ResumeRequest(study=name)):
        with pytest.raises(RequestError) as e:
            make()
        assert e.value.field == "study"
    with pytest.raises(RequestError) as e:
        CancelRequest(study="fine", by="")
    assert e.value.field == "by"


def test_the_command_line_refuses_the_same_names(tmp_path, capsys):
    assert main(["cancel", "../etc", "--root", str(tmp_path)]) == 2
    assert "study: must be a study name" in capsys.readouterr().err
    assert main(["delete", "a/b", "--root", str(tmp_path), "--yes"]) == 2
    assert "study: must be a study name" in capsys.readouterr().err
    assert main(["resume", "../etc", "--root", str(tmp_path)]) == 2
    assert "study: must be a study name" in capsys.readouterr().err
    assert not (tmp_path.parent / "etc").exists()
    assert main(["export", "s", "--root", str(tmp_path), "--target", TARGET, "--gpus", "64",
                 "--tokens", "1e12", "--format", "yaml"]) == 2
    assert "--format: unknown name 'yaml'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing made


@pytest.mark.parametrize("fmt", ["deepseek", "hf", "megatron", "torchtitan"])
def test_the_command_line_writes_every_file_the_registry_names(tmp_path, capsys, fmt):
    from test_export import _sqlite_study

    from tuner.app.commands import open_study
    from tuner.app.requests.actions import export

    url = _sqlite_study(tmp_path)
    out = tmp_path / "out" / formats.file_name(fmt, "run")
    assert main(["export", "synthetic", "--storage", url, "--pick", "knee", "--target", TARGET,
                 "--gpus", "64", "--tokens", "1e12", "--format", fmt, "--out", str(out)]) == 0
    written = {p.name: p.read_text() for p in out.parent.iterdir()}
    request = ExportRequest.from_options("synthetic", GOOD | {"pick": "knee", "format": fmt})
    study = open_study("synthetic", tmp_path / "synthetic", url)
    done = export(study, request, run_dir=tmp_path / "synthetic", storage=url, file=out.name)
    assert written == done.files and list(done.files)[0] == out.name
    assert len(written) == (2 if fmt in formats.SIDECARS else 1)
    if fmt in formats.SIDECARS:
        side = json.loads(written[f"run.{fmt}.moetune.json"])
        assert side["format"].startswith("moetune.") and "warnings" in side
        assert "training-only fields" in capsys.readouterr().err


def test_two_model_config_formats_exported_to_one_stem_keep_both_sidecars(tmp_path):
    """hf and deepseek both write .json: their sidecars are named by the format, so the second
    export does not silently replace the first's."""
    from test_export import _sqlite_study

    url = _sqlite_study(tmp_path)
    for fmt, out in (("hf", "v3.hf"), ("deepseek", "v3.deepseek")):
        assert main(["export", "synthetic", "--storage", url, "--pick", "knee", "--target",
                     TARGET, "--gpus", "64", "--tokens", "1e12", "--format", fmt,
                     "--out", str(tmp_path / "out" / out)]) == 0
    sides = {p.name: json.loads(p.read_text()) for p in (tmp_path / "out").glob("*.moetune.json")}
    assert sorted(sides) == ["v3.deepseek.moetune.json", "v3.hf.moetune.json"]
    assert sides["v3.hf.moetune.json"] != sides["v3.deepseek.moetune.json"]


def test_export_file_names():
    assert formats.file_name("hf", "flow-hf") == "flow-hf.json"
    assert formats.file_name("torchtitan", "flow-torchtitan") == "flow_torchtitan.py"
    assert formats.file_name("torchtitan", "7-up") == "m_7_up.py"
    assert formats.file_name("megatron") == f"{formats.DEFAULT_STEM}.args"
    assert formats.sidecar_name("run.json", "hf") == "run.hf.moetune.json"
    with pytest.raises(ValueError, match="unknown name"):
        formats.file_name("yaml", "x")


def test_the_server_client_dispatches_from_its_table():
    parser = build_parser()
    commands = next(a for a in parser._actions
                    if isinstance(a, argparse._SubParsersAction)).choices
    assert set(remote.COMMANDS) == set(remote.REMOTE_COMMANDS)
    for name, handler in remote.COMMANDS.items():
        assert name in commands and "--server" in commands[name].format_help()
        assert handler.__name__ == f"_{name}"


@pytest.mark.parametrize("state, owner, best, said", [
    ("running", "alice", {"values": {"val_loss": 2.5}, "trial": 3},
     "study s: running (owner alice), 1/4 trials done, 2 running; best val_loss=2.5 (#3)"),
    ("queued", "alice", None,  # no dangling 'best ' before a first feasible trial
     "study s: queued (owner alice), 1/4 trials done, 2 running; no feasible trial yet"),
    ("external", "", None, "study s: external (run by `moetune submit` without --server: the "
     "service neither queued nor runs it, so it has no owner here), 1/4"),
])
def test_status_over_the_server_says_the_best_or_none_and_what_external_means(
        state, owner, best, said):
    view = {"name": "s", "state": state, "owner": owner,
            "progress": {"done": 1, "total": 4, "running": 2, "best": best}}
    line = remote.status_line(view)
    assert line.startswith(said) and not line.rstrip().endswith("best")


def test_an_export_picks_the_knee_unless_told_otherwise():
    """The reports recommend the knee and print `--pick knee`: the CLI and a request's body
    take it by default too (with one objective the knee is the best trial)."""
    args = build_parser().parse_args(["export", "s", "--target", TARGET, "--gpus", "64",
                                      "--tokens", "1e12"])
    assert args.pick == ["knee"] and ExportRequest.from_namespace(args).pick == ("knee",)
    assert ExportRequest.from_options("s", GOOD).pick == ("knee",)


def test_the_command_reference_lists_every_command():
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "tuning.md").read_text()
    section = doc[doc.index("### Command reference"):].split("\nFrom Python:")[0]
    listed = {line.split("`moetune ")[1].split()[0].strip("`") for line in section.splitlines()
              if line.startswith("| `moetune ")}
    commands = next(a for a in build_parser()._actions
                    if isinstance(a, argparse._SubParsersAction)).choices
    assert set(commands) <= listed, sorted(set(commands) - listed)
