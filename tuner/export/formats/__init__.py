"""Renderers of a `FullRun` into launch configs, one module per format.

    >>> render("hf", full)  # doctest: +SKIP

Formats: ``native`` (moetune JSON with every rule), ``deepseek`` (model config JSON that
`ModelArgs.from_json` loads), ``hf`` (`transformers.DeepseekV3Config` JSON), ``megatron``
(Megatron-LM argument file), ``torchtitan`` (TOML job config).
"""

from __future__ import annotations

from collections.abc import Callable

from tuner.export.formats import deepseek, hf, megatron, native, torchtitan
from tuner.modeling.full_run import FullRun

FORMATS: dict[str, Callable[[FullRun], str]] = {
    "native": native.render,
    "deepseek": deepseek.render,
    "hf": hf.render,
    "megatron": megatron.render,
    "torchtitan": torchtitan.render,
}


def render(name: str, full: FullRun) -> str:
    """Render ``full`` in format ``name``.

    Raises:
        ValueError: unknown format; the message lists the valid ones.
    """
    if name not in FORMATS:
        raise ValueError(f"format: unknown name {name!r}; valid formats are {sorted(FORMATS)}.")
    return FORMATS[name](full)


__all__ = ["FORMATS", "render"]
