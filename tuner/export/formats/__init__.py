"""Renderers of a `FullRun` into launch configs, one module per format.

    >>> render("hf", full)  # doctest: +SKIP

Formats: ``native`` (moetune JSON with every rule), ``deepseek`` (the model config JSON
DeepSeek-V3's own ``ModelArgs`` loads), ``hf`` (transformers ``DeepseekV3Config`` or, for a
softmax router, ``DeepseekV2Config`` JSON), ``megatron`` (Megatron-LM argument file),
``torchtitan`` (a Python config module torchtitan >= 0.3 loads with ``--module M --config F``),
``torchtitan-toml`` (legacy: torchtitan v0.2.2's TOML job config). The text formats carry the
export's warnings and notes as ``#`` lines; the two model-config formats cannot, so `SIDECARS`
gives them a sidecar JSON (training-only fields, notes, warnings), written next to ``--out``.
`NOTES` gives each format's notes (what its consumer computes otherwise than the recipe), which
the command line also prints on stderr. `render` takes the output file's stem for the formats
whose text names it (`NAMED_BY_FILE`: torchtitan's ``--module``).
"""

from __future__ import annotations

from collections.abc import Callable
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
# each format's file suffix (the service names its downloads by it)
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


__all__ = ["FORMATS", "NAMED_BY_FILE", "NOTES", "SIDECARS", "SUFFIXES", "render"]
