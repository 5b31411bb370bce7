"""Hugging Face `transformers.DeepseekV3Config` JSON (transformers >= 5 key names).

`HF_NAMES` is the one table that knows HF's names; `to_hf` and `from_hf` both use it. Keys
without a `ModelArgs` counterpart are derived below: ``q_lora_rank`` 0 → null, ``rope_parameters``
(plain RoPE up to ``original_seq_len``, YaRN beyond it, upstream's ``mscale`` as
``mscale_all_dim``), ``max_position_embeddings`` = the run's sequence length.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from trainers.model_args import ModelArgs

if TYPE_CHECKING:
    from tuner.modeling.full_run import FullRun

HF_NAMES: dict[str, str] = {
    "vocab_size": "vocab_size",
    "dim": "hidden_size",
    "inter_dim": "intermediate_size",
    "moe_inter_dim": "moe_intermediate_size",
    "n_layers": "num_hidden_layers",
    "n_dense_layers": "first_k_dense_replace",
    "n_heads": "num_attention_heads",
    "n_routed_experts": "n_routed_experts",
    "n_shared_experts": "n_shared_experts",
    "n_activated_experts": "num_experts_per_tok",
    "n_expert_groups": "n_group",
    "n_limited_groups": "topk_group",
    "score_func": "scoring_func",
    "route_scale": "routed_scaling_factor",
    "q_lora_rank": "q_lora_rank",
    "kv_lora_rank": "kv_lora_rank",
    "qk_nope_head_dim": "qk_nope_head_dim",
    "qk_rope_head_dim": "qk_rope_head_dim",
    "v_head_dim": "v_head_dim",
    "mtp_depth": "num_mtp_layers",
    "init_std": "initializer_range",
    "norm_eps": "rms_norm_eps",
}


def to_hf(a: ModelArgs, *, seq_len: int) -> dict[str, Any]:
    """A `DeepseekV3Config`-compatible dict for ``a`` trained at ``seq_len``."""
    d: dict[str, Any] = {hf: getattr(a, ours) for ours, hf in HF_NAMES.items()}
    d["q_lora_rank"] = a.q_lora_rank or None
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": a.rope_theta}
    if seq_len > a.original_seq_len:
        rope = {"rope_type": "yarn", "rope_theta": a.rope_theta, "factor": a.rope_factor,
                "original_max_position_embeddings": a.original_seq_len,
                "beta_fast": a.beta_fast, "beta_slow": a.beta_slow, "mscale": 1.0,
                "mscale_all_dim": a.mscale}
    return d | {
        "model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"],
        "num_key_value_heads": a.n_heads, "hidden_act": "silu", "norm_topk_prob": True,
        "topk_method": "noaux_tc" if a.gate_bias else "greedy",
        "tie_word_embeddings": False, "attention_bias": False,
        "max_position_embeddings": seq_len, "rope_parameters": rope,
    }


def from_hf(d: dict[str, Any]) -> ModelArgs:
    """The `ModelArgs` fields an HF config holds (others at their defaults)."""
    kw = {ours: d[hf] for ours, hf in HF_NAMES.items() if hf in d}
    kw["q_lora_rank"] = kw.get("q_lora_rank") or 0
    if "topk_method" in d:
        kw["gate_bias"] = d["topk_method"] == "noaux_tc"
    return ModelArgs(**kw)


def render(full: FullRun) -> str:
    return json.dumps(to_hf(full.model_args, seq_len=full.recipe.seq_len), indent=2) + "\n"
