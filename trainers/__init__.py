"""trainers: the DeepSeek-V3-style MoE proxy, its data, its recipe and one training loop.

Pure PyTorch: imports neither Ray nor Optuna, so it runs alone on a GPU box with only torch.

    >>> from trainers import preset, Recipe, train
    >>> result = train(preset("debug"), Recipe(), token_budget=50_000)  # doctest: +SKIP
"""

from __future__ import annotations

from trainers.model_args import ModelArgs
from trainers.recipe import Recipe
from trainers.result import TrainResult

__all__ = ["ModelArgs", "Recipe", "TrainResult"]
