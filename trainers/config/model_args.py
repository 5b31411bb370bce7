"""ModelArgs: a DeepSeek-V3-style MoE's architecture, keyed exactly like upstream's JSON configs.

`ModelArgs(**json.load(open("config_671B.json")))` works: every key of upstream's
`inference/configs/*.json` is a field here with upstream's name and default. Fields below the
"# training-only" marker are ours: switches for what upstream hard-codes (the gate's balancing
bias, which upstream creates only when ``dim == 7168``) and parts that only training needs
(MTP, init).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from trainers.config.validation import reject_unknown, require

SCORE_FUNCS = ("softmax", "sigmoid")
# how group-limited routing scores a group: "auto" is DeepSeek's Gate (the best expert's score
# without a balancing bias, the sum of the best two with one); "max" and "sum_top2" fix it, e.g.
# "sum_top2" to tune the routing Megatron-LM and torchtitan run whatever the bias
GroupScore = Literal["auto", "max", "sum_top2"]
GROUP_SCORES: tuple[GroupScore, ...] = ("auto", "max", "sum_top2")


@dataclass(frozen=True, kw_only=True)
class ModelArgs:
    """Architecture of a DeepSeek-V3-style MoE transformer.

    Example:
        >>> args = ModelArgs(**json.load(open("config_671B.json")))  # doctest: +SKIP
        >>> small = ModelArgs(dim=64, n_layers=2, vocab_size=256)
    """

    # upstream inference-only keys, accepted so upstream JSONs load unchanged
    max_batch_size: int = 8
    max_seq_len: int = 4096 * 4
    dtype: Literal["bf16", "fp8"] = "bf16"
    scale_fmt: str | None = None
    # model
    vocab_size: int = 102400
    dim: int = 2048
    inter_dim: int = 10944
    moe_inter_dim: int = 1408
    n_layers: int = 27
    n_dense_layers: int = 1
    n_heads: int = 16
    # moe
    n_routed_experts: int = 64
    n_shared_experts: int = 2
    n_activated_experts: int = 6
    n_expert_groups: int = 1
    n_limited_groups: int = 1
    score_func: Literal["softmax", "sigmoid"] = "softmax"
    route_scale: float = 1.0
    # mla
    q_lora_rank: int = 0
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128
    # yarn (long-context extension; only active when training beyond original_seq_len)
    original_seq_len: int = 4096
    rope_theta: float = 10000.0
    rope_factor: float = 40
    beta_fast: int = 32
    beta_slow: int = 1
    mscale: float = 1.0
    # training-only: switches upstream hard-codes, and parts inference does not need
    gate_bias: bool = True  # selection-only fp32 bias for aux-loss-free balancing
    mtp_depth: int = 1  # D sequential multi-token-prediction modules (0 = off)
    init_std: float = 0.006  # DeepSeek-V3's init std
    norm_eps: float = 1e-6
    mup_base_dim: int = 0  # µP base width; 0 = standard parametrization (see trainers/nn/mup.py)
    group_score: GroupScore = "auto"  # see GROUP_SCORES

    def __post_init__(self) -> None:
        _validate(self)

    # derived sizes
    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def group_rule(self) -> str:
        """The group score group-limited routing uses: ``max`` or ``sum_top2``."""
        if self.group_score == "auto":
            return "sum_top2" if self.gate_bias else "max"
        return self.group_score

    @property
    def n_moe_layers(self) -> int:
        return self.n_layers - self.n_dense_layers

    @property
    def width_mult(self) -> float:
        """µP width multiplier dim / mup_base_dim (1.0 when µP is off)."""
        return self.dim / self.mup_base_dim if self.mup_base_dim else 1.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelArgs:
        """Build from a dict, rejecting unknown keys with the list of valid ones."""
        reject_unknown(d, (f.name for f in dataclasses.fields(cls)), "ModelArgs")
        return cls(**d)

    @classmethod
    def from_json(cls, path: str | Path) -> ModelArgs:
        """Load a DeepSeek-style config JSON (e.g. upstream's config_671B.json)."""
        path = Path(path)
        try:
            d = json.loads(path.read_text())
        except FileNotFoundError:
            raise ValueError(f"model config: file {str(path)!r} does not exist.") from None
        except json.JSONDecodeError as e:
            raise ValueError(f"model config: {str(path)!r} is not valid JSON ({e}).") from None
        if not isinstance(d, dict):
            raise ValueError(f"model config: {str(path)!r} must hold a JSON object.")
        return cls.from_dict(d)


def _validate(a: ModelArgs) -> None:
    positive = (
        "vocab_size", "dim", "inter_dim", "moe_inter_dim", "n_layers", "n_heads",
        "n_routed_experts", "n_activated_experts", "n_expert_groups", "n_limited_groups",
        "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "max_seq_len",
    )
    for name in positive:
        v = getattr(a, name)
        require(isinstance(v, int) and not isinstance(v, bool) and v > 0, name,
                "must be a positive integer", v, owner="ModelArgs")
    for name in ("n_dense_layers", "n_shared_experts", "q_lora_rank", "mtp_depth",
                 "mup_base_dim"):
        v = getattr(a, name)
        require(isinstance(v, int) and not isinstance(v, bool) and v >= 0, name,
                "must be a non-negative integer", v, owner="ModelArgs")
    require(a.score_func in SCORE_FUNCS, "score_func", f"must be one of {SCORE_FUNCS}",
            a.score_func, owner="ModelArgs")
    require(a.n_dense_layers <= a.n_layers, "n_dense_layers", f"must be <= n_layers={a.n_layers}",
            a.n_dense_layers, owner="ModelArgs")
    require(a.n_routed_experts % a.n_expert_groups == 0, "n_expert_groups",
            f"must divide n_routed_experts={a.n_routed_experts}", a.n_expert_groups,
            owner="ModelArgs")
    require(a.n_limited_groups <= a.n_expert_groups, "n_limited_groups",
            f"must be <= n_expert_groups={a.n_expert_groups}", a.n_limited_groups,
            owner="ModelArgs")
    per_group = a.n_routed_experts // a.n_expert_groups
    require(a.n_activated_experts <= a.n_limited_groups * per_group, "n_activated_experts",
            f"must be <= n_limited_groups * experts per group = "
            f"{a.n_limited_groups * per_group}", a.n_activated_experts, owner="ModelArgs")
    require(a.qk_rope_head_dim % 2 == 0, "qk_rope_head_dim", "must be even (RoPE pairs)",
            a.qk_rope_head_dim, owner="ModelArgs")
    for name in ("route_scale", "init_std", "norm_eps", "rope_theta"):
        v = getattr(a, name)
        require(isinstance(v, (int, float)) and math.isfinite(v) and v > 0, name,
                "must be a finite positive number", v, owner="ModelArgs")
    require(a.group_score in GROUP_SCORES, "group_score", f"must be one of {GROUP_SCORES}",
            a.group_score, owner="ModelArgs")
    if a.group_rule == "sum_top2" and a.n_expert_groups > 1:
        require(per_group >= 2, "n_expert_groups",
                "with a top-2-sum group score (gate_bias or group_score 'sum_top2') every "
                "group needs >= 2 experts", a.n_expert_groups, owner="ModelArgs")
