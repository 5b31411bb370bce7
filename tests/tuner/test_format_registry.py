"""Every launch format in `tuner.export.formats.FORMATS` through one conformance suite: its
tables complete, its text parsed by the reader its suffix names, the export's warnings in a file
it writes, its files named apart from every other format's. A new format gets these checks by
its registry line; the checks by each consumer's own code live in test_export_formats.py and
test_export_consumers.py."""

from __future__ import annotations

import ast
import dataclasses
import json
import shlex
import tomllib

import pytest

from trainers.config.model_args import ModelArgs
from trainers.config.recipe import Recipe
from tuner.export import formats
from tuner.modeling.full_run import FullRunTarget, build_full_run, load_target
from tuner.modeling.hardware import get_hardware

PROXY = ModelArgs(dim=64, n_layers=2, n_heads=4, inter_dim=128, moe_inter_dim=16,
                  vocab_size=256, n_routed_experts=8, n_activated_experts=2, kv_lora_rank=32,
                  qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16)
WARNING = "conformance: a warning every format must carry"


def _args(text: str) -> list[list[str]]:
    """A Megatron-LM argument file as its launch reads it (``grep -v '^#'``): every other line
    one ``--flag [value ...]``."""
    lines = [shlex.split(line) for line in text.splitlines() if line and not line.startswith("#")]
    assert lines and all(words[0].startswith("--") for words in lines), lines[:3]
    return lines


# how each suffix's consumer reads the text (a new suffix needs its reader here)
READERS = {"json": json.loads, "toml": tomllib.loads, "args": _args,
           "py": lambda text: ast.parse(text)}


@pytest.fixture(scope="module")
def full():
    target = FullRunTarget(model_args=load_target("deepseek-v3-671b")[0], name="671B",
                           hardware=get_hardware("h800"), gpus=2048, tokens=int(14.8e12),
                           seq_len=4096, tp=1, pp=16, ep=64)
    run = build_full_run(Recipe(precision="fp8", batch_schedule="linear"), PROXY, target,
                         proxy_tokens=200_000,
                         proxy_info={"study": "s", "trial": 3, "values": {"val_loss": 2.0}})
    return dataclasses.replace(run, warnings=[*run.warnings, WARNING])


def test_every_table_names_exactly_the_registered_formats():
    assert set(formats.SUFFIXES) == set(formats.FORMATS)
    assert set(formats.NOTES) == set(formats.FORMATS)
    assert set(formats.SIDECARS) <= set(formats.FORMATS)
    assert formats.NAMED_BY_FILE <= set(formats.FORMATS)
    assert set(formats.SUFFIXES.values()) <= set(READERS), "a suffix with no reader here"


@pytest.mark.parametrize("name", list(formats.FORMATS))
def test_every_format_renders_text_its_reader_parses(name, full):
    text = formats.render(name, full)
    assert READERS[formats.SUFFIXES[name]](text)
    assert all(isinstance(note, str) for note in formats.NOTES[name](full))


@pytest.mark.parametrize("name", list(formats.FORMATS))
def test_every_format_writes_the_export_s_warnings_and_its_sidecar_parses(name, full):
    files = formats.export_files(name, full, formats.file_name(name))
    first, *rest = files
    assert first == formats.file_name(name)
    assert files[first] == formats.render(
        name, full, stem=first.rsplit(".", 1)[0] if name in formats.NAMED_BY_FILE else None)
    assert len(rest) == (name in formats.SIDECARS)
    for side in rest:
        assert json.loads(files[side])["warnings"][-1] == WARNING
    assert any(WARNING in text for text in files.values())


def test_a_sidecar_never_takes_a_file_another_format_writes_to_the_same_stem(full):
    """``--out run`` in each format in turn: a launch config of one suffix is the user's to
    name apart, but a sidecar, named by the export, replaces no other format's file."""
    launch = {formats.file_name(name, "run") for name in formats.FORMATS}
    sidecars = [file for name in formats.FORMATS for file in
                list(formats.export_files(name, full, formats.file_name(name, "run")))[1:]]
    assert len(set(sidecars)) == len(sidecars) == len(formats.SIDECARS)
    assert not set(sidecars) & launch
