"""Recipe: every training knob the tuner may set, validated at construction.

`Recipe()` gives DeepSeek-V3's recipe scaled for a proxy: AdamW (0.9, 0.95), weight decay 0.1,
clip 1.0, a batch ramp from 20% of the final batch over the first few percent of tokens, linear
warmup, cosine decay to 10%, γ = 0.001, α = 1e-4, MTP λ = 0.3, bf16. The LR is larger than V3's
2.2e-4 because the proxy is ~1000× smaller (DeepSeek LLM's law: η ∝ C^-0.125).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal

from trainers.config.validation import reject_unknown, require

BATCH_SCHEDULES = ("constant", "linear", "step")
DECAYS = ("cosine", "wsd", "multistep")
PRECISIONS = ("fp32", "bf16", "fp8")
SPIKE_POLICIES = ("record", "skip", "rollback")


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """The training recipe of one proxy run.

    Batch sizes are in sequences of `seq_len` tokens; fractions are of the run's token budget.

    - batch_schedule: ``constant`` (batch_end throughout), ``linear`` (batch_start → batch_end over
      the first ``batch_ramp_fraction`` of tokens), ``step`` (three stages at 30% / 70% of tokens:
      batch_start, its geometric mean with batch_end, batch_end — ×1/×2/×4 when end = 4·start).
      The batches in between start and end are rounded to multiples of ``batch_multiple`` (a
      full run's data-parallel ranks × micro batch, set by the export; 1 for a proxy).
    - decay: ``cosine`` (to min_lr_ratio·lr), ``wsd`` (flat, then linear to min_lr_ratio·lr over
      the last ``decay_fraction``), ``multistep`` (DeepSeek LLM: ×0.316 at 80%, ×0.1 at 90%).
    - checkpoint_ratio: fraction of blocks recomputed in backward, spread evenly over depth.
    - spike_policy: a loss spike (loss > spike_factor × running mean) is ``record``-ed, its update
      ``skip``-ped, or the model ``rollback``-ed to the last good state and the batch skipped.

    Example:
        >>> Recipe(lr=3e-3, precision="fp8", batch_schedule="step")
        Recipe(...)
    """

    # batch-size schedule
    batch_schedule: Literal["constant", "linear", "step"] = "linear"
    batch_start: int = 8
    batch_end: int = 32
    batch_ramp_fraction: float = 0.1
    seq_len: int = 128
    micro_batch: int = 0  # max sequences per forward/backward (grad accumulation); 0 = no limit
    batch_multiple: int = 1  # a ramp's or step's in-between batches round to multiples of this
    # learning rate, as a function of tokens seen
    lr: float = 2e-3
    warmup_fraction: float = 0.05
    decay: Literal["cosine", "wsd", "multistep"] = "cosine"
    decay_fraction: float = 0.2  # wsd only: share of tokens in the final decay
    min_lr_ratio: float = 0.1
    # optimizer
    beta1: float = 0.9
    beta2: float = 0.95
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    # MoE balancing and MTP
    bias_update_speed: float = 1e-3  # γ of aux-loss-free balancing
    balance_loss_alpha: float = 1e-4  # α of the complementary sequence-wise balance loss
    mtp_lambda: float = 0.3
    # systems
    checkpoint_ratio: float = 0.0
    precision: Literal["fp32", "bf16", "fp8"] = "bf16"
    # stability
    spike_policy: Literal["record", "skip", "rollback"] = "record"
    spike_factor: float = 2.0
    seed: int = 0

    def __post_init__(self) -> None:
        _validate(self)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Recipe:
        """Build from a dict, rejecting unknown keys with the list of valid ones."""
        reject_unknown(d, field_names(), "Recipe")
        return cls(**d)


def field_names() -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(Recipe))


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_real(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _validate(r: Recipe) -> None:
    choices = {"batch_schedule": BATCH_SCHEDULES, "decay": DECAYS, "precision": PRECISIONS,
               "spike_policy": SPIKE_POLICIES}
    for name, allowed in choices.items():
        require(getattr(r, name) in allowed, name, f"must be one of {allowed}", getattr(r, name),
                owner="Recipe")
    for name in ("batch_start", "batch_end", "seq_len"):
        require(_is_int(getattr(r, name)) and getattr(r, name) > 0, name,
                "must be a positive integer", getattr(r, name), owner="Recipe")
    require(_is_int(r.micro_batch) and r.micro_batch >= 0, "micro_batch",
            "must be a non-negative integer", r.micro_batch, owner="Recipe")
    require(_is_int(r.batch_multiple) and r.batch_multiple > 0, "batch_multiple",
            "must be a positive integer", r.batch_multiple, owner="Recipe")
    for name in ("batch_start", "batch_end"):
        require(getattr(r, name) % r.batch_multiple == 0, name,
                f"must be a multiple of batch_multiple={r.batch_multiple}", getattr(r, name),
                owner="Recipe")
    require(_is_int(r.seed), "seed", "must be an integer", r.seed, owner="Recipe")
    if r.batch_schedule != "constant":
        require(r.batch_start <= r.batch_end, "batch_start",
                f"must be <= batch_end={r.batch_end} for a ramp", r.batch_start, owner="Recipe")
    unit = ("batch_ramp_fraction", "warmup_fraction", "decay_fraction", "min_lr_ratio",
            "checkpoint_ratio", "beta1", "beta2")
    for name in unit:
        v = getattr(r, name)
        require(_is_real(v) and 0.0 <= v <= 1.0, name, "must be in [0, 1]", v, owner="Recipe")
    require(r.beta1 < 1 and r.beta2 < 1, "beta2" if r.beta2 >= 1 else "beta1", "must be < 1",
            r.beta2 if r.beta2 >= 1 else r.beta1, owner="Recipe")
    require(r.warmup_fraction < 1.0, "warmup_fraction", "must be < 1", r.warmup_fraction,
            owner="Recipe")
    require(_is_real(r.lr) and r.lr > 0, "lr", "must be a finite positive number", r.lr,
            owner="Recipe")
    for name in ("weight_decay", "bias_update_speed", "balance_loss_alpha", "mtp_lambda"):
        v = getattr(r, name)
        require(_is_real(v) and v >= 0, name, "must be a finite number >= 0", v, owner="Recipe")
    require(_is_real(r.grad_clip) and r.grad_clip >= 0, "grad_clip",
            "must be a finite number >= 0 (0 = no clipping)", r.grad_clip, owner="Recipe")
    require(_is_real(r.spike_factor) and r.spike_factor > 1, "spike_factor",
            "must be a finite number > 1", r.spike_factor, owner="Recipe")
