"""Renderers of a `FullRun` into launch configs, one module per format.

    >>> render("hf", full)  # doctest: +SKIP

Formats: ``native`` (moetune JSON with every rule), ``deepseek`` (model config JSON that
`ModelArgs.from_json` loads), ``hf`` (`transformers.DeepseekV3Config` JSON), ``megatron``
(Megatron-LM argument file), ``torchtitan`` (TOML job config).
"""

from __future__ import annotations

from collections.abc import Callable

from tuner.export import FullRun
from tuner.formats import deepseek, hf, megatron, native, torchtitan

FORMATS: dict[str, tuple[Callable[[FullRun], str], str]] = {
    "native": (native.render, ".json"),
    "deepseek": (deepseek.render, ".json"),
    "hf": (hf.render, ".json"),
    "megatron": (megatron.render, ".args"),
    "torchtitan": (torchtitan.render, ".toml"),
}


def render(name: str, full: FullRun) -> str:
    """Render ``full`` in format ``name``.

    Raises:
        ValueError: unknown format; the message lists the valid ones.
    """
    if name not in FORMATS:
        raise ValueError(f"format: unknown name {name!r}; valid formats are {sorted(FORMATS)}.")
    return FORMATS[name][0](full)


def suffix(name: str) -> str:
    """File suffix for a format (``.json``, ``.args``, ``.toml``)."""
    return FORMATS[name][1]


__all__ = ["FORMATS", "render", "suffix"]
