"""Proxy sizes: `shrink` a full DeepSeek config keeping its ratios; a registry of named presets.

Every preset is DeepSeek-V3 (671B) shrunk by `shrink`, so proxies inherit its shape: sigmoid
gating with the balancing bias, group-limited routing, one shared expert, q compression, the
dense-layer fraction and the MLA head-dim proportions (nope : rope : v = 2 : 1 : 2).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from trainers.config.model_args import ModelArgs

# DeepSeek's published configs (16B, 236B, 671B), shipped unchanged; see configs/README.md.
PUBLISHED_CONFIGS = Path(__file__).resolve().parent / "configs"

# DeepSeek-V3's published inference/configs/config_671B.json.
DEEPSEEK_V3_671B = ModelArgs(
    vocab_size=129280, dim=7168, inter_dim=18432, moe_inter_dim=2048, n_layers=61,
    n_dense_layers=3, n_heads=128, n_routed_experts=256, n_shared_experts=1,
    n_activated_experts=8, n_expert_groups=8, n_limited_groups=4, route_scale=2.5,
    score_func="sigmoid", q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
    qk_rope_head_dim=64, v_head_dim=128, dtype="fp8",
)


def shrink(full: ModelArgs, *, dim: int, n_layers: int, n_routed_experts: int | None = None,
           n_activated_experts: int | None = None, qk_nope_head_dim: int = 16,
           vocab_size: int = 256, mtp_depth: int | None = None,
           mup_base_dim: int = 0) -> ModelArgs:
    """A proxy of `full` at width `dim` and depth `n_layers` with the same proportions.

    Kept: attention width n_heads·v_head_dim / dim, head-dim proportions, kv_lora_rank per head
    dim, q_lora_rank / dim, inter_dim / dim, moe_inter_dim / dim, the fraction of dense layers
    (at least one if the full model has any), active/total experts (unless n_activated_experts
    is given), shared experts, experts per group and the fraction of groups kept by routing.

    Example:
        >>> shrink(DEEPSEEK_V3_671B, dim=256, n_layers=6, n_routed_experts=32).n_heads
        8
    """
    w = dim / full.dim
    nope = qk_nope_head_dim
    rope = max(2, 2 * round(nope * full.qk_rope_head_dim / full.qk_nope_head_dim / 2))
    v = max(1, round(nope * full.v_head_dim / full.qk_nope_head_dim))
    n_heads = max(1, round(full.n_heads * full.v_head_dim * w / v))
    experts = n_routed_experts or full.n_routed_experts
    active = n_activated_experts or max(
        1, round(full.n_activated_experts * experts / full.n_routed_experts))
    groups, limited = _groups(full, experts, active)
    dense = round(full.n_dense_layers / full.n_layers * n_layers)
    if full.n_dense_layers and n_layers > 1:
        dense = max(1, dense)
    return ModelArgs(
        vocab_size=vocab_size, dim=dim, n_layers=n_layers, n_dense_layers=min(dense, n_layers),
        inter_dim=_round8(full.inter_dim * w), moe_inter_dim=_round8(full.moe_inter_dim * w),
        n_heads=n_heads, n_routed_experts=experts, n_shared_experts=full.n_shared_experts,
        n_activated_experts=active, n_expert_groups=groups, n_limited_groups=limited,
        score_func=full.score_func, route_scale=full.route_scale,
        q_lora_rank=_round8(full.q_lora_rank * w) if full.q_lora_rank else 0,
        kv_lora_rank=max(8, round(full.kv_lora_rank / full.qk_nope_head_dim * nope)),
        qk_nope_head_dim=nope, qk_rope_head_dim=rope, v_head_dim=v,
        max_seq_len=full.original_seq_len, original_seq_len=full.original_seq_len,
        rope_theta=full.rope_theta, gate_bias=full.gate_bias,
        mtp_depth=full.mtp_depth if mtp_depth is None else mtp_depth,
        init_std=full.init_std, mup_base_dim=mup_base_dim,
    )


def _round8(x: float) -> int:
    return max(8, 8 * round(x / 8))


def _groups(full: ModelArgs, experts: int, active: int) -> tuple[int, int]:
    """Keep the group count when each group still has >= 2 experts, else the most groups that do;
    the fraction of groups kept by routing stays the same. No groups if the full model has none."""
    if full.n_expert_groups == 1:
        return 1, 1
    keep_frac = full.n_limited_groups / full.n_expert_groups
    for groups in range(full.n_expert_groups, 1, -1):
        if groups > 1 and experts % groups == 0 and experts // groups >= 2:
            limited = max(1, round(keep_frac * groups))
            if active <= limited * (experts // groups):
                return groups, limited
    return 1, 1


_PRESETS: dict[str, Callable[[], ModelArgs]] = {
    # trains 50k tokens in seconds on one CPU core
    "debug": lambda: shrink(DEEPSEEK_V3_671B, dim=64, n_layers=2, n_routed_experts=8,
                            n_activated_experts=2),
    "proxy-s": lambda: shrink(DEEPSEEK_V3_671B, dim=128, n_layers=4, n_routed_experts=16,
                              n_activated_experts=2),
    "proxy-m": lambda: shrink(DEEPSEEK_V3_671B, dim=384, n_layers=8, n_routed_experts=32,
                              n_activated_experts=4, qk_nope_head_dim=32),
    "proxy-l": lambda: shrink(DEEPSEEK_V3_671B, dim=1024, n_layers=12, n_routed_experts=64,
                              n_activated_experts=4, qk_nope_head_dim=64),
}


def at_width(a: ModelArgs, dim: int) -> ModelArgs:
    """The proxy ``a`` at model width ``dim`` (FFN widths and heads in proportion), same depth,
    experts, head dims, vocabulary, MTP and µP base: the axis µP transfers across."""
    if dim < 1:
        raise ValueError(f"at_width: dim must be >= 1, but got dim={dim!r}.")
    return shrink(a, dim=dim, n_layers=a.n_layers, n_routed_experts=a.n_routed_experts,
                  n_activated_experts=a.n_activated_experts,
                  qk_nope_head_dim=a.qk_nope_head_dim, vocab_size=a.vocab_size,
                  mtp_depth=a.mtp_depth, mup_base_dim=a.mup_base_dim)


def preset_names() -> list[str]:
    return sorted(_PRESETS)


def preset(name: str) -> ModelArgs:
    """A named proxy size: one of `preset_names()`.

    Raises:
        ValueError: unknown name (the error lists the valid ones).
    """
    if name not in _PRESETS:
        raise ValueError(f"preset: unknown name {name!r}; valid names are {preset_names()}.")
    return _PRESETS[name]()


def count_params(args: ModelArgs) -> tuple[int, int]:
    """(total, active per token) parameters of the model `Transformer(args)` builds, MTP included.

    Counts by building the model on the meta device, so it always matches the real modules.
    """
    import torch

    from trainers.nn.model import Transformer
    from trainers.nn.moe import RoutedExperts

    with torch.device("meta"):
        model = Transformer(args)
    total = sum(p.numel() for p in model.parameters())
    routed = sum(p.numel() for m in model.modules() if isinstance(m, RoutedExperts)
                 for p in m.parameters())
    active = total - routed + math.floor(routed * args.n_activated_experts
                                         / args.n_routed_experts)
    return total, active
