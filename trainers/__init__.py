"""trainers: the DeepSeek-V3-style MoE proxy, its data, its recipe and one training loop.

Pure PyTorch: imports neither Ray nor Optuna, so it runs alone on a GPU box with only torch.

    >>> from trainers import preset, Recipe, train
    >>> result = train(preset("debug"), Recipe(), token_budget=50_000)  # doctest: +SKIP
    >>> result.val_loss, result.tokens_per_s  # doctest: +SKIP

Names are imported on first use: the configs (`ModelArgs`, `Recipe`, presets) and `TrainResult`
need only the standard library, so a command that reads a stored study does not pay for
importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "Corpus": "trainers.data", "load_corpus": "trainers.data", "stdlib_corpus": "trainers.data",
    "Transformer": "trainers.nn.model", "ModelArgs": "trainers.config.model_args",
    "DEEPSEEK_V3_671B": "trainers.presets", "count_params": "trainers.presets",
    "preset": "trainers.presets", "preset_names": "trainers.presets", "shrink": "trainers.presets",
    "Recipe": "trainers.config.recipe", "TrainResult": "trainers.result", "train": "trainers.loop",
}

__all__ = [
    "DEEPSEEK_V3_671B", "Corpus", "ModelArgs", "Recipe", "TrainResult", "Transformer",
    "count_params", "load_corpus", "preset", "preset_names", "shrink", "stdlib_corpus", "train",
]

if TYPE_CHECKING:
    from trainers.config.model_args import ModelArgs
    from trainers.config.recipe import Recipe
    from trainers.data import Corpus, load_corpus, stdlib_corpus
    from trainers.loop import train
    from trainers.nn.model import Transformer
    from trainers.presets import DEEPSEEK_V3_671B, count_params, preset, preset_names, shrink
    from trainers.result import TrainResult


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'trainers' has no attribute {name!r}")
