"""Megatron-LM argument file: one ``--flag [value]`` per line, ``#`` lines are notes.

Flag names and the rules they must satisfy follow Megatron-LM at the pinned revision
(`MEGATRON_REF`): ``megatron/training/arguments.py`` (``parse_args``, ``validate_args``), the
config dataclasses it turns into flags, and ``TransformerConfig.__post_init__``, which
``core_transformer_config_from_args`` runs. Launch it as `LAUNCH` says:
``CUDA_DEVICE_MAX_CONNECTIONS=1`` is what Megatron-LM's tensor and sequence parallelism need for
their communication to overlap in issue order; ``set -f`` keeps the shell from expanding the
``*`` and ``[]`` of the ``--moe-layer-freq`` pattern.

Mapping:

- MLA → ``--multi-latent-attention --qk-layernorm`` (the RMSNorms on the q and kv latents);
  Megatron's ``--qk-head-dim`` is the no-RoPE part (our qk_nope_head_dim).
- Router: sigmoid → ``--moe-router-score-function sigmoid`` (the top-k weights normalised, as
  DeepSeek-V3); softmax → ``softmax --moe-router-pre-softmax`` (softmax over all experts, then
  top-k, not renormalised, as DeepSeek's 16B and 236B). Megatron-LM accepts the balancing bias
  (``--moe-router-enable-expert-bias``) with sigmoid only; a softmax target's bias is dropped
  with a ``# NOTE:``.
- Pipeline: the stages of `tuner.modeling.cost_model.stage_layers`; when they are uneven,
  ``--decoder-first-pipeline-num-layers`` and ``--decoder-last-pipeline-num-layers``.
- Batch: a constant batch → ``--global-batch-size``; a ramp or step schedule →
  ``--step-batch-size-schedule`` (`full_run.batch_levels`, thresholds in tokens, comma-separated
  so the value stays one shell word), which excludes ``--global-batch-size``.
- Recompute ratio r → ``--recompute-granularity full --recompute-method block
  --recompute-num-layers round(r·blocks on the largest stage)``; fp8 → ``--fp8-format e4m3
  --fp8-recipe blockwise``; µP → ``--lr`` the hidden-matrix LR (lr / width_mult) and
  ``--decoupled-lr`` the base LR of the embedding and output layers, the one per-parameter LR
  Megatron-LM has; its norms take ``--lr``, and it has no µP init or output multiplier, which a
  ``# NOTE:`` says with what the run would need (`drifts.mup_note`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tuner.export.formats import drifts
from tuner.modeling.cost_model import recomputed_layers, stage_layers
from tuner.modeling.full_run import batch_levels, ramp_end_fraction

if TYPE_CHECKING:
    from tuner.modeling.full_run import FullRun

Flag = tuple[str, str | None]
MEGATRON_REF = "NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553"
LAUNCH = ("set -f; CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun ... pretrain_gpt.py "
          "$(grep -v '^#' run.args)")


def _model(full: FullRun) -> list[Flag]:
    a = full.model_args
    pattern = f"([0]*{a.n_dense_layers}+[1]*{a.n_moe_layers})"
    out: list[Flag] = [
        ("--num-layers", str(a.n_layers)), ("--hidden-size", str(a.dim)),
        ("--ffn-hidden-size", str(a.inter_dim)), ("--num-attention-heads", str(a.n_heads)),
        ("--seq-length", str(full.recipe.seq_len)),
        ("--max-position-embeddings", str(full.recipe.seq_len)),
        ("--vocab-size", str(a.vocab_size)), ("--normalization", "RMSNorm"),
        ("--norm-epsilon", repr(a.norm_eps)), ("--swiglu", None), ("--disable-bias-linear", None),
        ("--untie-embeddings-and-output-weights", None),
        ("--position-embedding-type", "rope"),
        ("--rotary-base", str(int(a.rope_theta))),  # Megatron parses it as int
        ("--init-method-std", repr(a.init_std)),
        ("--multi-latent-attention", None), ("--qk-layernorm", None),
    ]
    if a.q_lora_rank:
        out.append(("--q-lora-rank", str(a.q_lora_rank)))
    out += [("--kv-lora-rank", str(a.kv_lora_rank)), ("--qk-head-dim", str(a.qk_nope_head_dim)),
            ("--qk-pos-emb-head-dim", str(a.qk_rope_head_dim)),
            ("--v-head-dim", str(a.v_head_dim)),
            ("--num-experts", str(a.n_routed_experts)), ("--moe-layer-freq", pattern),
            ("--moe-ffn-hidden-size", str(a.moe_inter_dim)),
            ("--moe-router-topk", str(a.n_activated_experts)),
            ("--moe-router-score-function", a.score_func),
            *([("--moe-router-pre-softmax", None)] if a.score_func == "softmax" else []),
            ("--moe-router-topk-scaling-factor", repr(a.route_scale)),
            ("--moe-router-dtype", "fp32"), ("--moe-grouped-gemm", None),
            ("--moe-token-dispatcher-type", "alltoall")]
    if a.n_shared_experts:
        out.append(("--moe-shared-expert-intermediate-size",
                    str(a.n_shared_experts * a.moe_inter_dim)))
    if a.n_expert_groups > 1:
        out += [("--moe-router-num-groups", str(a.n_expert_groups)),
                ("--moe-router-group-topk", str(a.n_limited_groups))]
    if a.mtp_depth:
        out += [("--mtp-num-layers", str(a.mtp_depth)),
                ("--mtp-loss-scaling-factor", repr(full.recipe.mtp_lambda))]
    return out


def _balancing(full: FullRun, notes: list[str]) -> list[Flag]:
    r, a, out = full.recipe, full.model_args, []
    if a.gate_bias and a.score_func == "sigmoid":
        out += [("--moe-router-enable-expert-bias", None),
                ("--moe-router-bias-update-rate", repr(r.bias_update_speed))]
    elif a.gate_bias:
        notes.append(f"the balancing bias (gamma {r.bias_update_speed:.3g}) is dropped: "
                     "Megatron-LM's expert bias works with sigmoid routers only "
                     "(TransformerConfig raises for softmax); balance rests on the "
                     f"sequence-wise loss alone (alpha {r.balance_loss_alpha:.3g}).")
    if r.balance_loss_alpha > 0:
        out += [("--moe-router-load-balancing-type", "seq_aux_loss"),
                ("--moe-aux-loss-coeff", repr(r.balance_loss_alpha))]
    else:
        out.append(("--moe-router-load-balancing-type", "none"))
    return out


def schedule_value(full: FullRun) -> str:
    """``--step-batch-size-schedule``: ``TOKENS:BATCH`` pairs, comma-separated."""
    seq = full.recipe.seq_len
    return ",".join(f"{s * seq}:{b}" for s, b in batch_levels(full.recipe, full.target.tokens))


def _batch(full: FullRun) -> list[Flag]:
    r, s = full.recipe, full.steps
    out: list[Flag] = [("--micro-batch-size", str(r.micro_batch))]
    if ramp_end_fraction(r):  # excludes --global-batch-size (validate_args)
        out.append(("--step-batch-size-schedule", schedule_value(full)))
    else:
        out.append(("--global-batch-size", str(r.batch_end)))
    return out + [("--train-samples", str(s.samples))]


def _lr(full: FullRun, notes: list[str]) -> list[Flag]:
    r, s = full.recipe, full.steps
    lr = full.hidden_lr
    out: list[Flag] = [("--lr", repr(lr)), ("--min-lr", repr(lr * r.min_lr_ratio)),
                       ("--lr-warmup-samples", str(s.warmup_samples)),
                       ("--lr-decay-samples", str(s.samples))]
    if full.model_args.mup_base_dim:
        out += [("--decoupled-lr", repr(r.lr)),
                ("--decoupled-min-lr", repr(r.lr * r.min_lr_ratio))]
        notes.append(drifts.mup_note(full, "Megatron-LM", (
            f"--lr {lr:.4g} is the hidden matrices' LR and --decoupled-lr {r.lr:.4g} the base "
            "LR of the parameters Megatron-LM marks is_embedding_or_output_parameter (word "
            "embeddings and output layer, megatron/core/optimizer/__init__.py "
            "_get_param_groups); its norms train at --lr, not the base LR.")) + ".")
    if r.decay == "wsd":
        out += [("--lr-decay-style", "WSD"), ("--lr-wsd-decay-style", "linear"),
                ("--lr-wsd-decay-samples", str(s.decay_samples))]
    else:
        out.append(("--lr-decay-style", "cosine"))
        if r.decay == "multistep":
            notes.append(drifts.multistep_note(full, "Megatron-LM's --lr-decay-style") + ".")
    return out + [("--adam-beta1", repr(r.beta1)), ("--adam-beta2", repr(r.beta2)),
                  ("--weight-decay", repr(r.weight_decay)), ("--clip-grad", repr(r.grad_clip)),
                  ("--seed", str(r.seed))]


def _pipeline(full: FullRun) -> list[Flag]:
    p, n = full.plan, full.model_args.n_layers
    stages = [len(x) for x in stage_layers(n, p.pp)]
    out: list[Flag] = [("--pipeline-model-parallel-size", str(p.pp))]
    if len(set(stages)) > 1:
        out += [("--decoder-first-pipeline-num-layers", str(stages[0])),
                ("--decoder-last-pipeline-num-layers", str(stages[-1]))]
    return out


def _systems(full: FullRun) -> list[Flag]:
    r, p = full.recipe, full.plan
    out: list[Flag] = [("--tensor-model-parallel-size", str(p.tp)), *_pipeline(full),
                       ("--expert-model-parallel-size", str(p.ep)),
                       ("--expert-tensor-parallel-size", "1"),
                       ("--use-distributed-optimizer", None)]
    if p.tp > 1:
        out.append(("--sequence-parallel", None))
    per_stage = max(len(x) for x in stage_layers(full.model_args.n_layers, p.pp))
    n = recomputed_layers(per_stage, r.checkpoint_ratio)
    if n:
        out += [("--recompute-granularity", "full"), ("--recompute-method", "block"),
                ("--recompute-num-layers", str(n))]
    if r.precision == "fp32":
        return out
    out.append(("--bf16", None))
    if r.precision == "fp8":
        out += [("--fp8-format", "e4m3"), ("--fp8-recipe", "blockwise")]
    return out


def ramp_end_step(full: FullRun) -> int:
    """The step from which Megatron-LM's batch calculator gives the final batch: it looks the
    batch up by consumed samples in `schedule_value`'s levels."""
    levels, step, seen = batch_levels(full.recipe, full.target.tokens), 0, 0
    for (start, batch), (nxt, _) in zip(levels, levels[1:]):
        n = -(-(nxt - max(seen, start)) // batch)  # steps until the next level's first sample
        step, seen = step + n, max(seen, start) + n * batch
    return step


def _recipe_notes(full: FullRun) -> list[str]:
    r, notes = full.recipe, []
    if r.batch_schedule == "linear" and ramp_end_fraction(r):
        notes.append("the linear batch ramp is written as the steps it takes at multiples of "
                     f"dp*micro_batch={r.batch_multiple} (--step-batch-size-schedule).")
    if ramp_end_fraction(r) and (end := ramp_end_step(full)) != full.steps.ramp:
        notes.append(f"the batch reaches its final {r.batch_end} at step {end}, "
                     f"{full.steps.ramp - end} steps before the ramp's mark (step "
                     f"{full.steps.ramp}, the native export's 'ramp'): the in-between batches "
                     "round to multiples of dp*micro_batch, the last one up to the final.")
    if r.precision == "fp8":
        notes.append("--fp8-recipe blockwise needs Transformer Engine >= 2.3 (Megatron-LM's "
                     "get_fp8_recipe builds Float8BlockScaling only from 2.3 on).")
    if full.model_args.mtp_depth:
        notes.append(f"one MTP weight {r.mtp_lambda:.3g} for the whole run; DeepSeek-V3 used "
                     "0.3 for the first 10T tokens and 0.1 for the last 4.8T (technical report "
                     "4.2): to do the same, resume with a new --mtp-loss-scaling-factor.")
    if full.model_args.gate_bias:
        notes.append("DeepSeek-V3 set the bias update speed to 0 for its last 500B tokens "
                     "(technical report 4.2): resume with --moe-router-bias-update-rate 0 to "
                     "do the same.")
    return notes


def flags(full: FullRun) -> tuple[list[Flag], list[str]]:
    """The flags in file order and the notes on what could not be expressed exactly."""
    notes: list[str] = []
    if not float(full.model_args.rope_theta).is_integer():
        notes.append(f"rope_theta {full.model_args.rope_theta} truncated: Megatron-LM's "
                     "--rotary-base is an integer.")
    out = (_model(full) + _balancing(full, notes) + _batch(full) + _lr(full, notes)
           + _systems(full))
    return out, notes + _recipe_notes(full) + drifts.megatron(full)


def provenance(full: FullRun) -> list[str]:
    """What the file's flags do not say themselves: where the final batch comes from (its
    rule), and which numbers are modeled, not measured (the parallel plan, recompute, memory,
    GPU-hours), so the file alone tells a reader what to trust."""
    r, p, cost = full.recipe, full.plan, full.cost
    batch = next((x for x in full.rules if x.field == "batch_end"), None)
    why = f": {' '.join(batch.rule.split())}" if batch is not None else ""  # one line
    mem = cost["peak_memory_gib"]
    return [f"batch: {r.batch_end} sequences x {r.seq_len} tokens = "
            f"{r.batch_end * r.seq_len:,} tokens per step{why}",
            f"MODELED, not measured (tuner/modeling/cost_model.py): the parallel plan tp={p.tp} "
            f"pp={p.pp} ep={p.ep} dp={p.dp}, the recompute, the peak memory per GPU "
            f"({mem['total']:.1f} of {mem['capacity']:.1f} GiB) and {cost['gpu_hours']:.4g} "
            f"GPU-hours at MFU {cost['mfu']:g}; not modeled: {cost['not_modeled']}"]


def render(full: FullRun) -> str:
    out, notes = flags(full)
    head = [f"# moetune export for Megatron-LM ({MEGATRON_REF})",
            f"# study {full.proxy.get('study', '?')} trial {full.proxy.get('trial', '?')}; "
            f"{full.target.gpus} x {full.target.hardware.name}, {full.target.tokens} tokens",
            f"# launch: {LAUNCH}",
            f"# LR: {full.lr_line()}",
            *(f"# {line}" for line in provenance(full)),
            *(f"# WARNING: {w}" for w in full.warnings),
            *(f"# NOTE: {n}" for n in notes)]
    return "\n".join(head + [f if v is None else f"{f} {v}" for f, v in out]) + "\n"
