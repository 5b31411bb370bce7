"""Legacy: the torchtitan v0.2.2 TOML job config (the ``--job.config_file`` format).

Format ``torchtitan-toml``, for a team still on torchtitan 0.2.2; torchtitan 0.3 and later read
no TOML (``ConfigManager`` requires ``--module``), so format ``torchtitan``
(`tuner.export.formats.torchtitan`) writes their Python config module instead.
Section and key names follow ``torchtitan/config/job_config.py`` of the v0.2.2 release
(`TORCHTITAN_REF`), the last release that reads TOML job configs; its ``ConfigManager`` parses
every file in the consumer checks. torchtitan selects the architecture by ``model.flavor`` from
its own registry: DeepSeek's configs are flavors ``16B``, ``236B`` and ``671B``; other targets
need a registered flavor.

Batch and pipeline: ``training.local_batch_size`` is what one data-parallel rank takes per step
and ``parallelism.pipeline_parallel_microbatch_size`` splits it into microbatches. With pipeline
parallelism the whole step goes through the pipeline (local = global / dp), so there are
global / (dp·micro) microbatches per step, as in the Megatron-LM export, and the stages stay
busy; without it, local = micro and torchtitan accumulates gradients. The stages hold the
blocks of `tuner.modeling.cost_model.stage_layers` (``module_fqns_per_model_part``).

Not expressed in this file, hence listed as notes in its header: the batch ramp, the balancing
speed γ and α, the MTP module and weight, µP. torchtitan trains a constant global batch (the
final one), so ``steps``, ``warmup_steps`` and ``decay_ratio`` are counted for that batch
(`constant_batch_steps`): steps × batch × seq_len is the requested tokens, the warmup covers the
recipe's warmup sequences and the decay the tuned fraction of the tokens.
Checkpoint ratio r → ``mode = "selective"`` with ``selective_ac_option = "N"`` (every N-th
block, N = round(1/r)); fp8 → torchao float8 ``rowwise`` (torchtitan has no 1×128/128×128
blockwise recipe).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from tuner.export.formats import drifts
from tuner.modeling.cost_model import stage_layers
from tuner.modeling.full_run import (
    constant_batch_steps,
    describe_batch_schedule,
    ramp_end_fraction,
)

if TYPE_CHECKING:
    from tuner.modeling.full_run import FullRun

TORCHTITAN_REF = "pytorch/torchtitan@73a0e6979dd10b6b1904098eb3c8f62c18ab87ce (v0.2.2)"
FLAVORS = ("16B", "236B", "671B")


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


def _pipeline(full: FullRun) -> dict[str, Any]:
    """Microbatch size and the blocks of each stage (torchtitan's module names)."""
    p, n = full.plan, full.model_args.n_layers
    if p.pp == 1:
        return {}
    parts = [[f"layers.{i}" for i in stage] for stage in stage_layers(n, p.pp)]
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", "output"]
    return {"pipeline_parallel_microbatch_size": full.recipe.micro_batch,
            "module_fqns_per_model_part": parts}


def sections(full: FullRun) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """TOML tables (name → keys) and the notes on what the format cannot hold."""
    r, p, t = full.recipe, full.plan, full.target
    s = constant_batch_steps(r, t.tokens)
    # the warmup covers the recipe's warmup sequences at the final batch, so the LR at each
    # token is the recipe's (the warmup rule's step count at the final batch would not be)
    warmup = min(s.total, -(-full.steps.warmup_samples // r.batch_end))
    flavor = t.name if t.name in FLAVORS else "custom"
    notes = [f"constant global batch {r.batch_end}: torchtitan has no batch ramp, so steps "
             f"({s.total}) are counted at this batch to train {t.tokens} tokens; warmup_steps "
             f"({warmup}) covers the recipe's {full.steps.warmup_samples} warmup sequences "
             f"(tuned schedule: "
             f"{describe_batch_schedule(r, t.tokens, full.steps)})"
             if ramp_end_fraction(r) else "",
             f"gamma {r.bias_update_speed:.4g}, alpha {r.balance_loss_alpha}, MTP lambda "
             f"{r.mtp_lambda} live in torchtitan 0.2.2's model code, not in this file",
             "torchtitan's deepseek_v3 has no MTP module: the run trains without it"
             if full.model_args.mtp_depth else "",
             "flavor 'custom' must be registered in torchtitan's deepseek_v3 model args"
             if flavor == "custom" else "",
             drifts.mup_note(full, "torchtitan 0.2.2", (
                 f"torchtitan trains every parameter at one LR: the file writes the hidden "
                 f"matrices' {full.hidden_lr:.4g}, so embeddings, head and norms train at it "
                 "too, not at the base LR.")) if full.model_args.mup_base_dim else ""]
    decay = {"lr_scheduler": {"warmup_steps": warmup, "min_lr_factor": r.min_lr_ratio,
                              "decay_type": "linear" if r.decay == "wsd" else "cosine"}}
    if r.decay == "wsd" and s.total:
        # the decay starts after warmup at the latest, as in trainers.config.schedules.lr_at
        decay["lr_scheduler"]["decay_ratio"] = round(1 - max(s.decay_start, warmup) / s.total,
                                                     6)
    if r.decay == "multistep":
        notes.append("decay 'multistep' emitted as cosine (torchtitan: linear/sqrt/cosine)")
    tables: dict[str, dict[str, Any]] = {
        "job": {"description": f"moetune export: study {full.proxy.get('study', '?')} trial "
                               f"{full.proxy.get('trial', '?')}"},
        "model": {"name": "deepseek_v3", "flavor": flavor},
        "optimizer": {"name": "AdamW", "lr": full.hidden_lr, "beta1": r.beta1, "beta2": r.beta2,
                      "eps": 1e-8, "weight_decay": r.weight_decay},
        **decay,
        "training": {"local_batch_size": r.batch_end // p.dp if p.pp > 1 else r.micro_batch,
                     "global_batch_size": r.batch_end,
                     "seq_len": r.seq_len, "max_norm": r.grad_clip, "steps": s.total,
                     "mixed_precision_param": "float32" if r.precision == "fp32"
                     else "bfloat16"},
        "parallelism": {"data_parallel_replicate_degree": 1, "data_parallel_shard_degree": p.dp,
                        "tensor_parallel_degree": p.tp, "pipeline_parallel_degree": p.pp,
                        "expert_parallel_degree": p.ep, "expert_tensor_parallel_degree": 1,
                        **_pipeline(full)},
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
             f"# LR: {full.lr_line()}",
             *(f"# WARNING: {w}" for w in full.warnings),
             *(f"# NOTE: {n}" for n in notes)]
    for name, keys in tables.items():
        lines += ["", f"[{name}]", *(f"{k} = {_value(v)}" for k, v in keys.items())]
    return "\n".join(lines) + "\n"
