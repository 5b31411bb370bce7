"""Renderers of a `FullRun` into launch configs, one module per format.

    >>> render("hf", full)  # doctest: +SKIP

Formats: ``native`` (moetune JSON with every rule), ``deepseek`` (the model config JSON
DeepSeek-V3's own ``ModelArgs`` loads), ``hf`` (transformers ``DeepseekV3Config`` or, for a
softmax router, ``DeepseekV2Config`` JSON), ``megatron`` (Megatron-LM argument file),
``torchtitan`` (torchtitan v0.2.2 TOML job config). The text formats carry the export's warnings
and notes as ``#`` lines; the two model-config formats cannot, so `SIDECARS` gives them a
sidecar JSON (training-only fields, notes, warnings), written next to ``--out``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tuner.export.formats import deepseek, hf, megatron, native, torchtitan
from tuner.modeling.full_run import FullRun

FORMATS: dict[str, Callable[[FullRun], str]] = {
    "native": native.render,
    "deepseek": deepseek.render,
    "hf": hf.render,
    "megatron": megatron.render,
    "torchtitan": torchtitan.render,
}

SIDECARS: dict[str, Callable[[FullRun], dict[str, Any]]] = {
    "deepseek": deepseek.sidecar,
    "hf": hf.sidecar,
}


def render(name: str, full: FullRun) -> str:
    """Render ``full`` in format ``name``.

    Raises:
        ValueError: unknown format; the message lists the valid ones.
    """
    if name not in FORMATS:
        raise ValueError(f"format: unknown name {name!r}; valid formats are {sorted(FORMATS)}.")
    return FORMATS[name](full)


__all__ = ["FORMATS", "SIDECARS", "render"]
