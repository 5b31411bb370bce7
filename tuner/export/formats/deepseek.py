"""DeepSeek-V3's own model config JSON, which its ``inference/model.py`` loads as
``ModelArgs(**json.load(f))``, plus a sidecar with what that file cannot hold.

`UPSTREAM_KEYS` are the fields of upstream's ``ModelArgs`` at `DEEPSEEK_V3_REF`; the config holds
exactly these. Our training-only fields (``gate_bias``, ``mtp_depth``, ``init_std``,
``norm_eps``, ``mup_base_dim``, ``group_score``) and the export's notes and warnings go in the
sidecar (`sidecar`). The file describes the model as the full run trains it:

- ``max_seq_len`` is the run's sequence length, and ``original_seq_len`` at least that, since
  upstream applies YaRN (``rope_factor``) whenever ``max_seq_len > original_seq_len`` and a
  pre-training run uses plain RoPE at its own length (the full run's model args say so already,
  `tuner.modeling.full_run`, so the native export and this file agree);
- ``dtype`` follows the recipe: ``fp8`` for an fp8 recipe, else ``bf16`` (upstream knows no
  other).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from tuner.export.formats import drifts
from tuner.modeling.targets import DEEPSEEK_V3_REF

if TYPE_CHECKING:
    from tuner.modeling.full_run import FullRun

UPSTREAM_KEYS = (
    "max_batch_size", "max_seq_len", "dtype", "scale_fmt", "vocab_size", "dim", "inter_dim",
    "moe_inter_dim", "n_layers", "n_dense_layers", "n_heads", "n_routed_experts",
    "n_shared_experts", "n_activated_experts", "n_expert_groups", "n_limited_groups",
    "score_func", "route_scale", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
    "qk_rope_head_dim", "v_head_dim", "original_seq_len", "rope_theta", "rope_factor",
    "beta_fast", "beta_slow", "mscale",
)
TRAINING_ONLY = ("gate_bias", "mtp_depth", "init_std", "norm_eps", "mup_base_dim",
                 "group_score")
UPSTREAM_BIAS_DIM = 7168  # upstream's Gate builds its bias only at this width


def config(full: FullRun) -> dict[str, Any]:
    """The upstream-loadable config: exactly `UPSTREAM_KEYS`."""
    a = full.model_args
    d = {k: getattr(a, k) for k in UPSTREAM_KEYS}
    return d | {"dtype": "fp8" if full.recipe.precision == "fp8" else "bf16"}


def notes(full: FullRun) -> list[str]:
    a, r, out = full.model_args, full.recipe, []
    if a.gate_bias != (a.dim == UPSTREAM_BIAS_DIM):
        out.append(f"upstream's inference/model.py builds the gate bias only when dim == "
                   f"{UPSTREAM_BIAS_DIM}; this model trains {'with' if a.gate_bias else 'without'}"
                   f" one (gate_bias {a.gate_bias}) at dim {a.dim}: upstream's inference code "
                   "will not match it.")
    published = full.target.model_args.original_seq_len
    if r.seq_len > published:
        out.append(f"original_seq_len raised from {published} to {r.seq_len}: the run "
                   "pre-trains with plain RoPE at its own length (no YaRN).")
    if r.precision == "fp32":
        out.append("dtype bf16: the recipe trains in fp32, which upstream's config cannot say.")
    upstream_rule = "sum_top2" if a.dim == UPSTREAM_BIAS_DIM else "max"  # its Gate's rule
    return out + drifts.group_score_warning(full, "upstream's inference Gate", upstream_rule)


def sidecar(full: FullRun) -> dict[str, Any]:
    """What the config cannot hold: training-only fields, notes and the export's warnings."""
    return {"format": "moetune.deepseek_sidecar/1", "upstream": DEEPSEEK_V3_REF,
            "training_only": {k: getattr(full.model_args, k) for k in TRAINING_ONLY},
            "notes": notes(full), "warnings": list(full.warnings)}


def render(full: FullRun) -> str:
    return json.dumps(config(full), indent=2) + "\n"
