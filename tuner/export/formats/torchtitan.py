"""torchtitan TOML job config (the ``--job.config_file`` format).

Section and key names follow torchtitan's ``torchtitan/config/job_config.py`` as of
pytorch/torchtitan@238fa995 (Feb 2026), the last revision that reads TOML job configs; later
revisions moved to Python config registries, where the same ``section.key`` names are CLI
overrides. torchtitan selects the architecture by ``model.flavor`` from its own registry: the
DeepSeek-V3 configs are flavors ``16B`` and ``671B``; other targets need a registered flavor.

Not expressible in this config, hence listed as notes in the file header: the batch ramp,
Adam betas, the balancing speed γ and α, the MTP weight, µP. torchtitan trains a constant global
batch (the final one), so ``steps``, ``warmup_steps`` and ``decay_ratio`` are counted for that
batch (`constant_batch_steps`): steps × batch × seq_len is the requested tokens, and warmup and
decay cover the tuned fractions of them.
Checkpoint ratio r → ``mode = "selective"`` with ``selective_ac_option = "N"`` (every N-th
block, N = round(1/r)); fp8 → torchao float8 ``rowwise`` (torchtitan has no 1×128/128×128
blockwise recipe).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from tuner.modeling.full_run import (
    constant_batch_steps,
    describe_batch_schedule,
    ramp_end_fraction,
)

if TYPE_CHECKING:
    from tuner.modeling.full_run import FullRun

TORCHTITAN_REF = "pytorch/torchtitan@238fa9953e4aec2a62582121564273d7cbb1e9f1"
FLAVORS = ("16B", "671B")


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a valid TOML basic string
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(f"no TOML form for {v!r}")


def _ac(ratio: float) -> dict[str, Any]:
    """Checkpoint ratio → torchtitan AC: none, full, or every N-th block (N = round(1/r))."""
    every = max(1, round(1 / ratio)) if ratio > 0 else 0
    if every == 0:
        return {"mode": "none"}
    if every == 1:
        return {"mode": "full"}
    return {"mode": "selective", "selective_ac_option": str(every)}


def sections(full: FullRun) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """TOML tables (name → keys) and the notes on what the format cannot hold."""
    r, p, t = full.recipe, full.plan, full.target
    s = constant_batch_steps(r, t.tokens)
    flavor = t.name if t.name in FLAVORS else "custom"
    notes = [f"constant global batch {r.batch_end}: torchtitan has no batch ramp, so steps "
             f"({s.total}) and warmup_steps ({s.warmup}) are counted at this batch to train "
             f"{t.tokens} tokens, warmup over the first {100 * r.warmup_fraction:.3g}% (tuned "
             f"schedule: {describe_batch_schedule(r, t.tokens, full.steps)})"
             if ramp_end_fraction(r) else "",
             f"Adam betas ({r.beta1}, {r.beta2}), gamma {r.bias_update_speed}, alpha "
             f"{r.balance_loss_alpha}, MTP lambda {r.mtp_lambda} live in torchtitan's model "
             "and optimizer code, not in this file",
             "flavor 'custom' must be registered in torchtitan's deepseek_v3 model args"
             if flavor == "custom" else "",
             "muP multipliers are not applied by torchtitan" if full.model_args.mup_base_dim
             else ""]
    decay = {"lr_scheduler": {"warmup_steps": s.warmup, "min_lr_factor": r.min_lr_ratio,
                              "decay_type": "linear" if r.decay == "wsd" else "cosine"}}
    if r.decay == "wsd" and s.total:
        # the decay starts after warmup at the latest, as in trainers.schedules.lr_at
        decay["lr_scheduler"]["decay_ratio"] = round(1 - max(s.decay_start, s.warmup) / s.total,
                                                     6)
    if r.decay == "multistep":
        notes.append("decay 'multistep' emitted as cosine (torchtitan: linear/sqrt/cosine)")
    tables: dict[str, dict[str, Any]] = {
        "job": {"description": f"moetune export: study {full.proxy.get('study', '?')} trial "
                               f"{full.proxy.get('trial', '?')}"},
        "model": {"name": "deepseek_v3", "flavor": flavor},
        "optimizer": {"name": "AdamW", "lr": r.lr, "eps": 1e-8, "weight_decay": r.weight_decay},
        **decay,
        "training": {"local_batch_size": r.micro_batch, "global_batch_size": r.batch_end,
                     "seq_len": r.seq_len, "max_norm": r.grad_clip, "steps": s.total,
                     "mixed_precision_param": "float32" if r.precision == "fp32"
                     else "bfloat16"},
        "parallelism": {"data_parallel_replicate_degree": 1, "data_parallel_shard_degree": p.dp,
                        "tensor_parallel_degree": p.tp, "pipeline_parallel_degree": p.pp,
                        "expert_parallel_degree": p.ep, "expert_tensor_parallel_degree": 1},
        "activation_checkpoint": _ac(r.checkpoint_ratio),
        "debug": {"seed": r.seed},
    }
    ac = tables["activation_checkpoint"]
    done = {"none": 0.0, "full": 1.0}.get(ac["mode"]) if ac["mode"] != "selective" \
        else 1 / int(ac["selective_ac_option"])
    if done is not None and abs(done - r.checkpoint_ratio) > 1e-9:
        notes.append(f"checkpoint ratio {r.checkpoint_ratio:.3g} rounded to {done:.3g} "
                     "(torchtitan checkpoints every N-th block)")
    if r.precision == "fp8":
        tables["model"]["converters"] = ["quantize.linear.float8", "quantize.grouped_mm.float8"]
        tables["quantize.linear.float8"] = {"recipe_name": "rowwise",
                                            "filter_fqns": ["output", "router.gate"]}
        tables["quantize.grouped_mm.float8"] = {"fqns": ["experts"]}
        notes.append("fp8: torchao float8 'rowwise' (no 1x128/128x128 blockwise recipe here)")
    return tables, [n for n in notes if n]


def render(full: FullRun) -> str:
    tables, notes = sections(full)
    lines = [f"# moetune export for torchtitan ({TORCHTITAN_REF})",
             *(f"# NOTE: {n}" for n in notes)]
    for name, keys in tables.items():
        lines += ["", f"[{name}]", *(f"{k} = {_value(v)}" for k, v in keys.items())]
    return "\n".join(lines) + "\n"
