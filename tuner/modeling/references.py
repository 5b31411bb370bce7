"""What published pre-training runs used, as ranges an exported number is checked against.

Each `Reference` is a band around published values, with the values and where they come from.
The band's width is our tolerance, stated in ``band``; a number outside it is not wrong, but
no run we can cite used it, so the export warns. `outside` returns those warnings.

Published values (DeepSeek-V3: arXiv:2412.19437 section 4.2; DeepSeek LLM: arXiv:2401.02954
section 2.3; Llama 3: arXiv:2407.21783 section 3.4.1):

- peak LR: DeepSeek LLM's fit eta_opt = 0.3118·C^-0.125 (DeepSeek-V3 used 2.2e-4, the fit
  gives 2.7e-4 at its C);
- final batch: DeepSeek LLM's fit B_opt = 0.2920·C^0.3271 tokens (DeepSeek-V3 used 15360 × 4K
  = 63M tokens, 2.0 × the fit at its C);
- warmup: 2000 steps (DeepSeek LLM, DeepSeek-V3), 8000 (Llama 3 405B);
- balancing bias update speed γ: 0.001 (DeepSeek-V3; Wang et al. 2024, arXiv:2408.15664);
- sequence-wise balance loss α: 0.0001 (DeepSeek-V3);
- MTP loss weight λ: 0.3, then 0.1 (DeepSeek-V3);
- weight decay: 0.1 (DeepSeek-V3, DeepSeek LLM).

`DEEPSEEK_V3` holds DeepSeek-V3's whole pre-training recipe as section 4.2 states it: peak LR
2.2e-4 after a 2K-step linear warmup, held until 10T tokens, then a cosine decay to 2.2e-5 over
4.3T tokens (2.2e-5 for 333B tokens, 7.3e-6 for the last 167B); batch 3072 → 15360 sequences
of 4K over the first 469B of 14.8T tokens; AdamW (0.9, 0.95), weight decay 0.1, clip 1.0;
bias update speed 0.001 (0.0 for the last 500B tokens), alpha 0.0001, MTP lambda 0.3 (0.1 after
10T tokens); fp8 (section 3.3).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Reference:
    """A band [low, high] for one exported number, and what it rests on."""

    name: str
    low: float
    high: float
    published: str
    band: str

    def check(self, value: float) -> str | None:
        """A warning when ``value`` lies outside the band, else None."""
        if self.low <= value <= self.high:
            return None
        return (f"{self.name} {value:.4g} is outside [{self.low:.3g}, {self.high:.3g}] "
                f"({self.band}; published: {self.published}).")


def lr_reference(eta_opt: float) -> Reference:
    return Reference(name="lr", low=eta_opt / 2, high=eta_opt * 2,
                     published=f"DeepSeek LLM's fit eta_opt(C_full) = {eta_opt:.3g}; "
                               "DeepSeek-V3 2.2e-4",
                     band="a factor 2 around the fit")


def batch_reference(b_opt_tokens: float) -> Reference:
    return Reference(name="final batch (tokens)", low=b_opt_tokens / 4, high=b_opt_tokens * 4,
                     published=f"DeepSeek LLM's fit B_opt(C_full) = {b_opt_tokens:.3g} tokens; "
                               "DeepSeek-V3 63M tokens (2.0x its fit)",
                     band="a factor 4 around the fit")


FIXED: dict[str, Reference] = {
    "warmup_steps": Reference(name="warmup steps", low=1000, high=16000,
                              published="2000 (DeepSeek LLM, DeepSeek-V3), 8000 (Llama 3 405B)",
                              band="a factor 2 beyond the published values"),
    "bias_update_speed": Reference(name="bias update speed gamma", low=1e-4, high=1e-2,
                                   published="0.001 (DeepSeek-V3; Wang et al. 2024)",
                                   band="a factor 10 around it"),
    "balance_loss_alpha": Reference(name="balance loss alpha", low=1e-5, high=1e-3,
                                    published="0.0001 (DeepSeek-V3)",
                                    band="a factor 10 around it"),
    "mtp_lambda": Reference(name="MTP weight lambda", low=0.05, high=0.6,
                            published="0.3 then 0.1 (DeepSeek-V3)",
                            band="a factor 2 beyond the published values"),
    "weight_decay": Reference(name="weight decay", low=0.1 / 3, high=0.3,
                              published="0.1 (DeepSeek-V3, DeepSeek LLM)",
                              band="a factor 3 around it"),
}


def outside(values: dict[str, float], extra: list[tuple[Reference, float]]) -> list[str]:
    """Warnings for the ``values`` (keys of `FIXED`) and ``extra`` pairs outside their bands."""
    pairs = [(FIXED[k], v) for k, v in values.items()] + extra
    return [w for ref, v in pairs if (w := ref.check(v)) is not None]


@dataclass(frozen=True, kw_only=True)
class PublishedRecipe:
    """One published pre-training recipe, as its paper states it: amounts in tokens, batches in
    sequences of ``seq_len``, the LR schedule as warmup, a stable peak, then a decay to
    ``final_lr``. `tuner.modeling.baselines` maps it to a proxy."""

    name: str
    source: str
    target: str  # its model config, a `tuner.modeling.targets.TARGETS` name
    tokens: int
    seq_len: int
    peak_lr: float
    final_lr: float  # where the decay ends
    warmup_steps: int
    stable_until_tokens: int  # the LR stays at its peak until this many tokens
    batch_start: int
    batch_end: int
    batch_ramp_tokens: int  # the batch grows from start to end over these first tokens
    bias_update_speed: float
    balance_loss_alpha: float
    mtp_lambda: float
    weight_decay: float
    beta1: float
    beta2: float
    grad_clip: float
    precision: str
    not_representable: tuple[str, ...] = ()  # what a `trainers.Recipe` cannot express


DEEPSEEK_V3 = PublishedRecipe(
    name="deepseek-v3",
    source="DeepSeek-V3 technical report (arXiv:2412.19437), sections 3.3 and 4.2",
    target="deepseek-v3-671b", tokens=14_800_000_000_000, seq_len=4096,
    peak_lr=2.2e-4, final_lr=2.2e-5, warmup_steps=2000,
    stable_until_tokens=10_000_000_000_000,
    batch_start=3072, batch_end=15360, batch_ramp_tokens=469_000_000_000,
    bias_update_speed=0.001, balance_loss_alpha=0.0001, mtp_lambda=0.3, weight_decay=0.1,
    beta1=0.9, beta2=0.95, grad_clip=1.0, precision="fp8",
    not_representable=(
        "the decay's cosine curve over 4.3T tokens (a wsd Recipe decays linearly)",
        "the last 167B tokens at 7.3e-6 (the Recipe's decay ends at 2.2e-5)",
        "gamma 0.0 for the last 500B tokens",
        "MTP lambda 0.1 after the first 10T tokens"),
)
