"""Batch-size and learning-rate schedules as functions of tokens seen.

Both are pure functions of (recipe, tokens_seen, token_budget) so that every run consumes the
same data whatever its batch schedule: the schedule changes how many steps the tokens take.
"""

from __future__ import annotations

import math

from trainers.config.recipe import Recipe

STEP_BOUNDARIES = (0.3, 0.7)  # `step` batch schedule: stage changes at 30% and 70% of tokens
MULTISTEP = ((0.8, 0.316), (0.9, 0.1))  # DeepSeek LLM: ×0.316 at 80% of tokens, ×0.1 at 90%


def batch_size_at(recipe: Recipe, tokens_seen: int, token_budget: int) -> int:
    """Global batch size (sequences) for the step that starts after `tokens_seen` tokens."""
    frac = tokens_seen / token_budget
    start, end = recipe.batch_start, recipe.batch_end
    if recipe.batch_schedule == "constant":
        return end
    if recipe.batch_schedule == "linear":
        if recipe.batch_ramp_fraction == 0 or frac >= recipe.batch_ramp_fraction:
            return end
        return _in_steps_of(recipe, start + (end - start) * frac / recipe.batch_ramp_fraction)
    middle = _in_steps_of(recipe, math.sqrt(start * end))
    if frac < STEP_BOUNDARIES[0]:
        return start
    return middle if frac < STEP_BOUNDARIES[1] else end


def _in_steps_of(recipe: Recipe, batch: float) -> int:
    """An in-between batch as a whole number of `batch_multiple`s (start and end already are,
    so rounding keeps it between them and keeps the schedule monotonic)."""
    m = recipe.batch_multiple
    return max(m, m * round(batch / m))


def lr_at(recipe: Recipe, tokens_seen: int, token_budget: int) -> float:
    """Learning rate for the step that starts after `tokens_seen` tokens."""
    frac = tokens_seen / token_budget
    peak, warm = recipe.lr, recipe.warmup_fraction
    if frac < warm:
        return peak * (tokens_seen + 1) / (warm * token_budget + 1)
    floor = peak * recipe.min_lr_ratio
    if recipe.decay == "cosine":
        progress = min(1.0, (frac - warm) / (1.0 - warm))
        return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    if recipe.decay == "wsd":
        decay_start = max(warm, 1.0 - recipe.decay_fraction)
        if frac < decay_start or decay_start >= 1.0:
            return peak
        progress = min(1.0, (frac - decay_start) / (1.0 - decay_start))
        return peak + (floor - peak) * progress
    factor = 1.0
    for boundary, f in MULTISTEP:
        if frac >= boundary:
            factor = f
    return peak * factor
