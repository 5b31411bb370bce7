"""The recipes DeepSeek published for the configs `tuner.modeling.targets` names: the answer a
law's extrapolation is held against at the full run (standard parametrization, peak LR of
every parameter, batches in sequences of 4096 tokens).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class PublishedRecipe:
    name: str
    lr: float
    batch_start: int  # sequences
    batch_end: int
    ramp_tokens: float  # tokens over which the batch ramps (0: constant)
    tokens: float  # the pre-training run's tokens
    warmup_steps: int
    seq_len: int
    source: str

    @property
    def batch_tokens(self) -> float:
        """The final batch in tokens per step."""
        return float(self.batch_end * self.seq_len)


PUBLISHED: dict[str, PublishedRecipe] = {
    "deepseek-v3-671b": PublishedRecipe(
        name="DeepSeek-V3", lr=2.2e-4, batch_start=3072, batch_end=15360, ramp_tokens=469e9,
        tokens=14.8e12, warmup_steps=2000, seq_len=4096,
        source="DeepSeek-V3 technical report (arXiv:2412.19437) §4.2"),
    "deepseek-v3-236b": PublishedRecipe(
        name="DeepSeek-V2", lr=2.4e-4, batch_start=2304, batch_end=9216, ramp_tokens=225e9,
        tokens=8.1e12, warmup_steps=2000, seq_len=4096,
        source="DeepSeek-V2 (arXiv:2405.04434) §3.1.2"),
    "deepseek-v3-16b": PublishedRecipe(
        name="DeepSeek-V2-Lite", lr=4.2e-4, batch_start=4608, batch_end=4608, ramp_tokens=0.0,
        tokens=5.7e12, warmup_steps=2000, seq_len=4096,
        source="DeepSeek-V2 (arXiv:2405.04434) appendix B (DeepSeek-V2-Lite)"),
}


def published_recipe(target_name: str) -> PublishedRecipe | None:
    """The published recipe of a `targets.TARGETS` name (any case), else None."""
    return PUBLISHED.get(target_name.lower())
