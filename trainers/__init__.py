"""trainers: the DeepSeek-V3-style MoE proxy, its data, its recipe and one training loop.

Pure PyTorch: imports neither Ray nor Optuna, so it runs alone on a GPU box with only torch.

    >>> from trainers import preset, Recipe, train
    >>> result = train(preset("debug"), Recipe(), token_budget=50_000)  # doctest: +SKIP
    >>> result.val_loss, result.tokens_per_s  # doctest: +SKIP
"""

from __future__ import annotations

from trainers.data import Corpus, load_corpus, stdlib_corpus
from trainers.model import Transformer
from trainers.model_args import ModelArgs
from trainers.presets import DEEPSEEK_V3_671B, count_params, preset, preset_names, shrink
from trainers.recipe import Recipe
from trainers.result import TrainResult
from trainers.train import train

__all__ = [
    "DEEPSEEK_V3_671B", "Corpus", "ModelArgs", "Recipe", "TrainResult", "Transformer",
    "count_params", "load_corpus", "preset", "preset_names", "shrink", "stdlib_corpus", "train",
]
