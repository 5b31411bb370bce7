"""Hugging Face config JSON (transformers >= 5 key names) for the router the model has.

transformers' ``DeepseekV3ForCausalLM`` always routes by sigmoid (normalised top-k weights,
a correction bias); ``DeepseekV2ForCausalLM`` routes by softmax over all experts (top-k weights
not renormalised, no bias). So a sigmoid model is written as ``deepseek_v3`` with
``norm_topk_prob`` true, a softmax model (DeepSeek's 16B, 236B) as ``deepseek_v2`` with
``norm_topk_prob`` false and ``topk_method`` ``group_limited_greedy`` when routing is limited
to groups, as DeepSeek-V3's ``inference/model.py`` ``Gate`` computes them. What neither class
can express (a softmax router with a balancing bias) is a note in the sidecar and a warning.

`HF_NAMES` is the one table that knows HF's names; `to_hf` and `from_hf` both use it. Keys
without a `ModelArgs` counterpart are derived below: ``q_lora_rank`` 0 → null,
``rope_parameters`` plain RoPE (the run pre-trains at its own length; no YaRN),
``max_position_embeddings`` = the run's sequence length.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from trainers.config.model_args import ModelArgs
from tuner.export.formats import drifts

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


def model_type(a: ModelArgs) -> str:
    """``deepseek_v3`` for a sigmoid router, ``deepseek_v2`` for a softmax one."""
    return "deepseek_v3" if a.score_func == "sigmoid" else "deepseek_v2"


def to_hf(a: ModelArgs, *, seq_len: int) -> dict[str, Any]:
    """An HF config dict for ``a`` trained at ``seq_len`` (`model_type` picks the class)."""
    d: dict[str, Any] = {hf: getattr(a, ours) for ours, hf in HF_NAMES.items()}
    d["q_lora_rank"] = a.q_lora_rank or None
    kind = model_type(a)
    if kind == "deepseek_v2":  # DeepseekV2Config has no MTP key: it would be a stray one
        del d["num_mtp_layers"]
    arch = "DeepseekV3ForCausalLM" if kind == "deepseek_v3" else "DeepseekV2ForCausalLM"
    limited = "group_limited_greedy" if a.n_expert_groups > 1 else "greedy"
    return d | {
        "model_type": kind, "architectures": [arch],
        "num_key_value_heads": a.n_heads, "hidden_act": "silu",
        "norm_topk_prob": a.score_func == "sigmoid",
        "topk_method": "noaux_tc" if kind == "deepseek_v3" else limited,
        "tie_word_embeddings": False, "attention_bias": False,
        "max_position_embeddings": seq_len,
        "rope_parameters": {"rope_type": "default", "rope_theta": a.rope_theta},
    }


def from_hf(d: dict[str, Any]) -> ModelArgs:
    """The `ModelArgs` fields an HF config holds (others at their defaults)."""
    kw = {ours: d[hf] for ours, hf in HF_NAMES.items() if hf in d}
    kw["q_lora_rank"] = kw.get("q_lora_rank") or 0
    if d.get("model_type") == "deepseek_v2":
        kw |= {"score_func": "softmax", "gate_bias": False}
    elif d.get("model_type") == "deepseek_v3":
        kw |= {"score_func": "sigmoid", "gate_bias": True}
    return ModelArgs(**kw)


def notes(full: FullRun) -> list[str]:
    """What the HF model computes otherwise than the run, and what the config leaves out."""
    a, r, out = full.model_args, full.recipe, []
    if a.score_func == "softmax" and a.gate_bias:
        out.append("DeepseekV2ForCausalLM routes by softmax without a balancing bias, and "
                   "DeepseekV3ForCausalLM only by sigmoid: this model's softmax router with a "
                   "bias cannot be expressed; the bias is left out (train without it, or load "
                   "the weights with a custom router).")
    if a.score_func == "sigmoid" and not a.gate_bias:
        out.append("DeepseekV3ForCausalLM always has the correction bias; this model trains "
                   "without one, so it stays at its initial zeros.")
    kind = model_type(a)
    if a.mtp_depth:
        out.append(f"the run trains {a.mtp_depth} MTP module(s) (weight {r.mtp_lambda:.3g}); "
                   + ("DeepseekV3ForCausalLM builds none from num_mtp_layers, so their weights "
                      "have no place in the HF model" if kind == "deepseek_v3" else
                      "DeepseekV2Config has no MTP key (none is written) and "
                      "DeepseekV2ForCausalLM no MTP module"))
    rule = "sum_top2" if kind == "deepseek_v3" else "max"
    cls = "DeepseekV3ForCausalLM" if kind == "deepseek_v3" else "DeepseekV2ForCausalLM"
    out += drifts.group_score_warning(full, f"transformers' {cls}", rule)
    out.append(f"a model config only: the recipe's LR {full.hidden_lr:.3g}, its schedule and "
               f"batch, gamma {r.bias_update_speed:.3g} and alpha {r.balance_loss_alpha:.3g} "
               "are in the native, megatron and torchtitan exports, not here.")
    return out


def sidecar(full: FullRun) -> dict[str, Any]:
    return {"format": "moetune.hf_sidecar/1", "notes": notes(full),
            "warnings": list(full.warnings)}


def render(full: FullRun) -> str:
    return json.dumps(to_hf(full.model_args, seq_len=full.recipe.seq_len), indent=2) + "\n"
