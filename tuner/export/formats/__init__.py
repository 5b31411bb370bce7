"""Renderers of a `FullRun` into launch configs, one module per format.

    >>> render("hf", full)  # doctest: +SKIP

Formats: ``native`` (moetune JSON with every rule), ``deepseek`` (the model config JSON
DeepSeek-V3's own ``ModelArgs`` loads), ``hf`` (transformers ``DeepseekV3Config`` or, for a
softmax router, ``DeepseekV2Config`` JSON), ``megatron`` (Megatron-LM argument file),
``torchtitan`` (a Python config module torchtitan >= 0.3 loads with ``--module M --config F``),
``torchtitan-toml`` (legacy: torchtitan v0.2.2's TOML job config). The text formats carry the
export's warnings and notes as ``#`` lines; the two model-config formats cannot, so `SIDECARS`
gives them a sidecar JSON (training-only fields, notes, warnings), written next to ``--out``
and named by its format too (`sidecar_name`), so two formats exported to one stem keep both.
`NOTES` gives each format's notes (what its consumer computes otherwise than the recipe), which
the command line also prints on stderr. `render` takes the output file's stem for the formats
whose text names it (`NAMED_BY_FILE`: torchtitan's ``--module``).

`export_files` says which files an export in a format writes, names and contents (the launch
config, then its sidecar), and `file_name` what the launch config is called when nobody chose a
name; the command line (``--out``) and the service's download both write exactly these.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import PurePath
from typing import Any

from tuner.export.formats import deepseek, hf, megatron, native, torchtitan, torchtitan_toml
from tuner.modeling.full_run import FullRun

FORMATS: dict[str, Callable[[FullRun], str]] = {
    "native": native.render,
    "deepseek": deepseek.render,
    "hf": hf.render,
    "megatron": megatron.render,
    "torchtitan": torchtitan.render,
    "torchtitan-toml": torchtitan_toml.render,
}
NAMED_BY_FILE = frozenset({"torchtitan"})
DEFAULT_STEM = torchtitan.DEFAULT_MODULE  # a launch config's name when nobody chose one
# each format's file suffix (`file_name`: a launch config's name when nobody chose one)
SUFFIXES: dict[str, str] = {"native": "json", "deepseek": "json", "hf": "json",
                            "megatron": "args", "torchtitan": "py", "torchtitan-toml": "toml"}

SIDECARS: dict[str, Callable[[FullRun], dict[str, Any]]] = {
    "deepseek": deepseek.sidecar,
    "hf": hf.sidecar,
}


NOTES: dict[str, Callable[[FullRun], list[str]]] = {
    "native": lambda full: [],
    "deepseek": deepseek.notes,
    "hf": hf.notes,
    "megatron": lambda full: megatron.flags(full)[1],
    "torchtitan": torchtitan.notes,
    "torchtitan-toml": lambda full: torchtitan_toml.sections(full)[1],
}


def render(name: str, full: FullRun, *, stem: str | None = None) -> str:
    """Render ``full`` in format ``name``; ``stem`` is the output file's name without its
    suffix, for the formats in `NAMED_BY_FILE` (their default name otherwise).

    Raises:
        ValueError: unknown format (the message lists the valid ones), or a ``stem`` the
            format cannot be named by.
    """
    if name not in FORMATS:
        raise ValueError(f"format: unknown name {name!r}; valid formats are {sorted(FORMATS)}.")
    if name == "torchtitan" and stem is not None:
        return torchtitan.render(full, module=stem)
    return FORMATS[name](full)


def file_name(name: str, stem: str = DEFAULT_STEM) -> str:
    """The launch config's file name for an export in format ``name`` whose name nobody chose:
    ``{stem}.{suffix}`` (`SUFFIXES`), the stem made a Python identifier for the formats whose
    text names their file (`NAMED_BY_FILE`: torchtitan imports its config as a module)."""
    if name not in FORMATS:
        raise ValueError(f"format: unknown name {name!r}; valid formats are {sorted(FORMATS)}.")
    if name in NAMED_BY_FILE:
        stem = re.sub(r"\W", "_", stem if stem[:1].isalpha() else f"m_{stem}")
    return f"{stem}.{SUFFIXES[name]}"


def sidecar_name(file: str, name: str) -> str:
    """Where format ``name``'s sidecar goes: ``run.json`` in ``hf`` → ``run.hf.moetune.json``.
    The format is in the name because ``hf`` and ``deepseek`` both write ``.json`` launch
    configs: exported to one stem, one sidecar would silently replace the other's."""
    return f"{PurePath(file).stem}.{name}.moetune.json"


def export_files(name: str, full: FullRun, file: str) -> dict[str, str]:
    """Every file an export of ``full`` in format ``name`` writes, by name (no folder): the
    launch config as ``file`` first (its stem names torchtitan's module), then, for the
    formats in `SIDECARS`, the sidecar JSON next to it (`sidecar_name`, named by the format).

    Raises:
        ValueError: unknown format, or a ``file`` the format cannot be named by.
    """
    stem = PurePath(file).stem
    files = {file: render(name, full, stem=stem if name in NAMED_BY_FILE else None)}
    side = SIDECARS.get(name)
    if side is not None:
        files[sidecar_name(file, name)] = json.dumps(side(full), indent=2) + "\n"
    return files


__all__ = ["DEFAULT_STEM", "FORMATS", "NAMED_BY_FILE", "NOTES", "SIDECARS", "SUFFIXES",
           "export_files", "file_name", "render", "sidecar_name"]
