"""Megatron-LM argument file: one ``--flag [value]`` per line, ``#`` lines are notes.

Flag names follow Megatron-LM's ``megatron/training/arguments.py`` and the config dataclasses it
turns into flags (checked at NVIDIA/Megatron-LM d98e8a64, 2026-08-22). Use it as
``set -f; torchrun ... pretrain_gpt.py $(grep -v '^#' run.args)`` (``set -f``: the
``--moe-layer-freq`` pattern has ``*`` and ``[]`` the shell must not expand).

Mapping notes: Megatron's ``--qk-head-dim`` is the no-RoPE part (our qk_nope_head_dim); the
batch ramp is ``--rampup-batch-size START INCREMENT SAMPLES`` (linear, in steps of dp·micro);
recompute ratio r → ``--recompute-granularity full --recompute-method block
--recompute-num-layers round(r·layers per stage)``; fp8 → ``--fp8-format e4m3 --fp8-recipe
blockwise``; µP → ``--lr`` the hidden-matrix LR and ``--decoupled-lr`` the base LR of the
embedding and output layers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tuner.modeling.cost_model import recomputed_layers, stage_layers
from tuner.modeling.full_run import describe_batch_schedule, ramp_end_fraction

if TYPE_CHECKING:
    from tuner.modeling.full_run import FullRun

Flag = tuple[str, str | None]
MEGATRON_REF = "NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553"


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
        ("--multi-latent-attention", None),
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


def _balancing(full: FullRun) -> list[Flag]:
    r, out = full.recipe, []
    if full.model_args.gate_bias:
        out += [("--moe-router-enable-expert-bias", None),
                ("--moe-router-bias-update-rate", repr(r.bias_update_speed))]
    if r.balance_loss_alpha > 0:
        out += [("--moe-router-load-balancing-type", "seq_aux_loss"),
                ("--moe-aux-loss-coeff", repr(r.balance_loss_alpha))]
    else:
        out.append(("--moe-router-load-balancing-type", "none"))
    return out


def _batch(full: FullRun, notes: list[str]) -> list[Flag]:
    r, s, p = full.recipe, full.steps, full.plan
    out: list[Flag] = [("--micro-batch-size", str(r.micro_batch)),
                       ("--global-batch-size", str(r.batch_end)),
                       ("--train-samples", str(s.samples))]
    # a zero-length ramp would divide by zero in Megatron's batch-size calculator
    if ramp_end_fraction(r) and s.ramp_samples:
        if r.batch_schedule == "step":
            notes.append(f"{describe_batch_schedule(r, full.target.tokens, s)}: Megatron-LM has "
                         f"no step schedule; emitted as a linear ramp {r.batch_start} -> "
                         f"{r.batch_end} over the first {s.ramp_samples} samples, where the "
                         "step schedule reaches its final batch.")
        out.append(("--rampup-batch-size", f"{r.batch_start} {p.dp * r.micro_batch} "
                                           f"{s.ramp_samples}"))
    return out


def _lr(full: FullRun, notes: list[str]) -> list[Flag]:
    r, s = full.recipe, full.steps
    lr = full.hidden_lr
    out: list[Flag] = [("--lr", repr(lr)), ("--min-lr", repr(lr * r.min_lr_ratio)),
                       ("--lr-warmup-samples", str(s.warmup_samples)),
                       ("--lr-decay-samples", str(s.samples))]
    if full.model_args.mup_base_dim:
        out += [("--decoupled-lr", repr(r.lr)),
                ("--decoupled-min-lr", repr(r.lr * r.min_lr_ratio))]
    if r.decay == "wsd":
        out += [("--lr-decay-style", "WSD"), ("--lr-wsd-decay-style", "linear"),
                ("--lr-wsd-decay-samples", str(s.decay_samples))]
    else:
        out.append(("--lr-decay-style", "cosine"))
        if r.decay == "multistep":
            notes.append("decay 'multistep' (x0.316 at 80%, x0.1 at 90% of tokens) has no "
                         "Megatron-LM lr-decay-style; emitted as cosine.")
    return out + [("--adam-beta1", repr(r.beta1)), ("--adam-beta2", repr(r.beta2)),
                  ("--weight-decay", repr(r.weight_decay)), ("--clip-grad", repr(r.grad_clip)),
                  ("--seed", str(r.seed))]


def _systems(full: FullRun) -> list[Flag]:
    r, p = full.recipe, full.plan
    out: list[Flag] = [("--tensor-model-parallel-size", str(p.tp)),
                       ("--pipeline-model-parallel-size", str(p.pp)),
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


def flags(full: FullRun) -> tuple[list[Flag], list[str]]:
    """The flags in file order and the notes on what could not be expressed exactly."""
    notes: list[str] = []
    if not float(full.model_args.rope_theta).is_integer():
        notes.append(f"rope_theta {full.model_args.rope_theta} truncated: Megatron-LM's "
                     "--rotary-base is an integer.")
    out = (_model(full) + _balancing(full) + _batch(full, notes) + _lr(full, notes)
           + _systems(full))
    return out, notes


def render(full: FullRun) -> str:
    out, notes = flags(full)
    head = [f"# moetune export for Megatron-LM ({MEGATRON_REF})",
            f"# study {full.proxy.get('study', '?')} trial {full.proxy.get('trial', '?')}; "
            f"{full.target.gpus} x {full.target.hardware.name}, {full.target.tokens} tokens",
            *(f"# NOTE: {n}" for n in notes)]
    return "\n".join(head + [f if v is None else f"{f} {v}" for f, v in out]) + "\n"
