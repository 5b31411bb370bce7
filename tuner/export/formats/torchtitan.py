"""torchtitan >= 0.3 config module: a Python function returning torchtitan's ``Trainer.Config``.

torchtitan 0.3.0 (`TORCHTITAN_REF`) reads no TOML: ``torchtitan.train`` calls
``ConfigManager.parse_args``, which imports ``--module M`` (a fully qualified importable module)
and calls its function ``--config F`` (``torchtitan/config/manager.py``). The export is such a
module. Its function starts from torchtitan's own ``deepseek_v3_16b`` / ``deepseek_v3_671b``
config (``torchtitan/models/deepseek_v3/config_registry.py``; the 236B flavor has no config
function of its own, so it starts from the 16B one, which shares its tokenizer) and sets what
the recipe tuned. The header's ``# launch:`` line is the command, with the module named after
the file (``--out run_671b.py`` → ``--module run_671b``; the file's folder on ``PYTHONPATH``).

Mapping (torchtitan's names at 0.3.0):

- LR, Adam betas, eps, weight decay → the AdamW param group of ``default_adamw``; warmup,
  decay shape, min LR → ``LRSchedulersContainer.Config`` (``decay_ratio`` for WSD).
- Batch: torchtitan trains one global batch (the final one). ``steps`` are counted at it
  (`constant_batch_steps`) and the warmup covers the same tokens as the recipe's warmup
  (``warmup_steps`` = warmup samples / final batch), so the LR at each token is the recipe's;
  the batch ramp itself cannot be expressed (a note describes the tuned one). The function
  sets the batch in whichever schema the installed ``TrainingConfig`` has (`_batch`): 0.3.0's
  sequences or main's tokens (after 0.3.0; checked at b5bcd76), so one file loads in both.
- Parallelism: dp → ``data_parallel_shard_degree``, tp, pp, ep; with pp, the stages of
  `tuner.modeling.cost_model.stage_layers` (``module_fqns_per_model_part``, one stage per rank,
  schedule ``1F1B``) and the microbatch size.
- Checkpoint ratio r: 0 → no AC, 1 → ``FullAC``; in between torchtitan 0.3 has no per-block
  option, so ``SelectiveAC`` (per op) stands in, with a note.
- fp8 → torchao float8 converters (``Float8LinearConverter`` rowwise, gate and head kept in
  bf16, and ``Float8GroupedExpertsConverter``); torchtitan has no 1×128/128×128 blockwise
  recipe (a note says so). torchtitan does not depend on torchao: the file's second line says
  to install it (`TORCHAO_NEEDED`), and ``moetune export`` prints it as a note.
- Router: every ``MoE.Config``'s ``load_balance_coeff`` is γ (the bias update speed) when the
  model has a balancing bias, ``None`` (no bias) when it has none; every RMSNorm's ``eps`` is
  the model's ``norm_eps``; MTP depth and weight → ``num_mtp_layers`` and ``MTPLoss`` (not with
  pipeline parallelism: torchtitan's MTP raises there, so the file leaves it out and says so).
- LR: one AdamW group, so under µP the hidden matrices' LR (lr / width_mult), which nearly
  every parameter gets; the base LR of embeddings, head and norms, and µP's init and output
  multipliers, are not expressed (`drifts.mup_note` says what the run would need).
- Not in torchtitan, hence ``# NOTE:`` lines (also printed on stderr by ``moetune export``,
  sizes from `tuner.export.formats.drifts`): the sequence-wise balance loss α, µP, a group score
  by max
  (torchtitan scores a group by the sum of its top-2 scores), document-causal attention
  (torchtitan always masks block-causally by document; the proxy attends causally across the
  packed sequence).
"""

from __future__ import annotations

import keyword
import math
import pprint
from typing import TYPE_CHECKING

from tuner.export.formats import drifts
from tuner.modeling.cost_model import stage_layers
from tuner.modeling.full_run import (
    constant_batch_steps,
    describe_batch_schedule,
    ramp_end_fraction,
)

if TYPE_CHECKING:
    from tuner.modeling.full_run import FullRun

TORCHTITAN_REF = ("torchtitan 0.3.0 (PyPI wheel sha256 "
                  "5563ccf9a295b24e00a36087149e9c2d0686cecbd3972c31e67227029293af42) and "
                  "main at b5bcd76c66d0acb1a08b176d9639425bc55e0b2a")
BASES = {"16B": "deepseek_v3_16b", "236B": "deepseek_v3_16b", "671B": "deepseek_v3_671b"}
DEFAULT_MODULE = "moetune_run"
# torchtitan's fp8 converters build on torchao, which torchtitan does not depend on: without it
# 0.3.0's ConfigManager stops with "torchao is not installed"
TORCHAO_NEEDED = ("torchao (pip install torchao): this fp8 recipe's float8 converters need it "
                  "and torchtitan does not install it; without it torchtitan stops at "
                  "\"torchao is not installed\"")
FUNCTION = "moetune_config"


def check_module_name(name: str) -> None:
    """A ``--module`` name torchtitan can import: a Python identifier, not a keyword.

    Raises:
        ValueError: names the rule and the value.
    """
    if not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(f"--out: a torchtitan config module's file name must be a Python "
                         f"identifier (letters, digits, '_'), but got {name!r}.")


def launch(module: str, gpus: int, gpus_per_node: int = 8) -> str:
    """The one-line launch command for the module ``module`` in the current folder, on every
    node (torchrun's c10d rendezvous at ``$MASTER_ADDR``)."""
    nodes = max(1, gpus // gpus_per_node)
    return (f"PYTHONPATH=.:$PYTHONPATH torchrun --nnodes {nodes} --nproc_per_node "
            f"{min(gpus, gpus_per_node)} --rdzv_backend c10d --rdzv_endpoint $MASTER_ADDR:29500 "
            f"-m torchtitan.train --module {module} --config {FUNCTION}")


def _ac(ratio: float) -> tuple[str, str]:
    """(the AC config expression, a note or '') for checkpoint ratio ``ratio``."""
    if ratio <= 0:
        return "None", ""
    if ratio >= 1:
        return "FullAC.Config()", ""
    return "SelectiveAC.Config()", (
        f"checkpoint ratio {ratio:.3g}: torchtitan 0.3 has no per-block AC ratio; per-op "
        "selective AC (saves the costly ops, recomputes every second matmul) stands in, so "
        "activation memory and recompute differ from the modeled ratio")


def _pipeline(full: FullRun) -> list[str]:
    """The pipeline's schedule and stages (its microbatches are part of `_batch`)."""
    p, n = full.plan, full.model_args.n_layers
    if p.pp == 1:
        return []
    parts = [[f"layers.{i}" for i in stage] for stage in stage_layers(n, p.pp)]
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", "lm_head"]
    return ['par.pipeline_parallel_schedule = "1F1B"',
            "par.module_fqns_per_model_part = "
            + pprint.pformat(parts, width=90, compact=True).replace("\n", "\n    ")]


def _batch(full: FullRun) -> list[str]:
    """The batch in whichever schema the installed torchtitan's ``TrainingConfig`` has.

    0.3.0 counts sequences: ``local_batch_size`` per data-parallel rank and forward (with a
    pipeline: per step, cut into ``pipeline_parallel_microbatch_size`` microbatches),
    ``global_batch_size``, ``seq_len``. main after 0.3.0 (b5bcd76, ``torchtitan/trainer.py``)
    counts tokens: ``num_tokens_per_microbatch_per_dp_rank`` per forward,
    ``parallelism.num_pp_microbatches`` forwards per pipeline step, ``num_tokens_per_train_step``
    in all (gradient accumulation makes up the rest), ``max_context_length``. Both describe the
    same step: the recipe's micro-batch per forward, its final batch per step.
    """
    r, p = full.recipe, full.plan
    seq, micro = r.seq_len, r.micro_batch
    local = r.batch_end // p.dp if p.pp > 1 else micro
    pp_micro = local // micro if p.pp > 1 else 1
    return ["t = config.training",
            'if hasattr(t, "num_tokens_per_train_step"):  # torchtitan main: the batch in tokens',
            f"    t.num_tokens_per_microbatch_per_dp_rank = {micro * seq}",
            f"    t.num_tokens_per_train_step = {r.batch_end * seq}",
            f"    t.max_context_length = {seq}",
            *([f"    par.num_pp_microbatches = {pp_micro}"] if p.pp > 1 else []),
            "else:  # torchtitan 0.3.0: the batch in sequences",
            f"    t.local_batch_size = {local}",
            f"    t.global_batch_size = {r.batch_end}",
            f"    t.seq_len = {seq}",
            *([f"    par.pipeline_parallel_microbatch_size = {micro}"] if p.pp > 1 else [])]


def _model(full: FullRun, flavor: str, notes: list[str]) -> list[str]:
    a, r = full.model_args, full.recipe
    mtp = a.mtp_depth if full.plan.pp == 1 else 0
    if a.mtp_depth and not mtp:
        notes.append(f"MTP (depth {a.mtp_depth}, weight {r.mtp_lambda:.3g}) left out: "
                     "torchtitan 0.3.0's MTP does not support pipeline parallelism "
                     "(models/deepseek_v3/mtp.py raises); the run trains without it")
    conv = ""
    if r.precision == "fp8":
        conv = (',\n    converters=[Float8LinearConverter.Config(filter_fqns=["lm_head", '
                '"router.gate"]),\n                Float8GroupedExpertsConverter.Config()]')
        notes.append("fp8: torchao float8 'rowwise' (torchtitan has no 1x128/128x128 "
                     "blockwise recipe)")
    out = [f'config.model_spec = model_registry("{flavor}", attn_backend="flex", '
           f"num_mtp_layers={mtp}{conv})"]
    if mtp:
        out.append("config.loss = MTPLoss.Config(\n    global_vocab_size=decoder_vocab_size("
                   f"config.model_spec), mtp_scale={r.mtp_lambda!r})")
    else:
        out.append("config.loss = ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(\n"
                   "    global_vocab_size=decoder_vocab_size(config.model_spec)))")
    coeff = repr(r.bias_update_speed) if a.gate_bias else "None"
    return out + ["for _, norm, _, _ in config.model_spec.model.traverse(RMSNorm.Config):",
                  f"    norm.eps = {a.norm_eps!r}",
                  "for _, moe, _, _ in config.model_spec.model.traverse(MoE.Config):",
                  f"    moe.load_balance_coeff = {coeff}  # gamma; None: no balancing bias"]


def _schedule(full: FullRun) -> list[str]:
    r, s = full.recipe, constant_batch_steps(full.recipe, full.target.tokens)
    warmup = min(s.total, math.ceil(full.steps.warmup_samples / r.batch_end))
    decay = "linear" if r.decay == "wsd" else "cosine"
    out = [f"config.lr_scheduler = LRSchedulersContainer.Config(\n    warmup_steps={warmup}, "
           f'decay_type="{decay}", min_lr_factor={r.min_lr_ratio!r}'
           + (f", decay_ratio={_decay_ratio(full, warmup)!r})" if r.decay == "wsd" else ")")]
    # one AdamW group: the LR nearly every parameter gets (under muP the hidden matrices')
    return out + [f"config.optimizer = default_adamw(\n    lr={full.hidden_lr!r}, "
                  f"betas=({r.beta1!r}, {r.beta2!r}), eps=1e-08, "
                  f"weight_decay={r.weight_decay!r})"]


def _decay_ratio(full: FullRun, warmup: int) -> float:
    """WSD: the share of the steps after the decay starts (after warmup at the latest)."""
    s = constant_batch_steps(full.recipe, full.target.tokens)
    return round(1 - max(s.decay_start, warmup) / s.total, 6) if s.total else 0.0


def _training(full: FullRun) -> list[str]:
    r, p = full.recipe, full.plan
    s = constant_batch_steps(r, full.target.tokens)
    return [f"config.training.steps = {s.total}",
            f"config.training.max_norm = {r.grad_clip!r}",
            "config.training.mixed_precision_param = "
            + ('"float32"' if r.precision == "fp32" else '"bfloat16"'),
            "par = config.parallelism",
            "par.data_parallel_replicate_degree = 1",
            f"par.data_parallel_shard_degree = {p.dp}",
            f"par.tensor_parallel_degree = {p.tp}",
            f"par.pipeline_parallel_degree = {p.pp}",
            f"par.expert_parallel_degree = {p.ep}",
            *_pipeline(full),
            *_batch(full),
            f"config.debug.seed = {r.seed}"]


def body(full: FullRun) -> tuple[list[str], list[str]]:
    """The config function's statements and the notes on what differs from the recipe."""
    flavor = full.target.name
    if flavor not in BASES:
        raise ValueError(f"--format torchtitan: the target must be one of torchtitan's "
                         f"deepseek_v3 flavors {sorted(BASES)}, but got {flavor!r}.")
    notes: list[str] = []
    ac, note = _ac(full.recipe.checkpoint_ratio)
    notes += [note] if note else []
    lines = [f"config = {BASES[flavor]}()", *_model(full, flavor, notes), *_schedule(full),
             *_training(full), f"config.activation_checkpoint = {ac}"]
    return lines, notes + _recipe_notes(full)


def _recipe_notes(full: FullRun) -> list[str]:
    r, a = full.recipe, full.model_args
    out = drifts.torchtitan(full)
    if ramp_end_fraction(r):
        tuned = describe_batch_schedule(r, full.target.tokens, full.steps)
        out.append(f"constant global batch {r.batch_end}: torchtitan has no batch ramp; the "
                   f"tuned schedule is {tuned}; steps are counted at the final batch and "
                   f"warmup covers the recipe's {full.steps.warmup_samples} warmup sequences")
    if r.balance_loss_alpha > 0:
        out.append(f"sequence-wise balance loss alpha {r.balance_loss_alpha:.3g} left out: "
                   "torchtitan 0.3.0 has none")
    if r.decay == "multistep":
        out.append(drifts.multistep_note(full, "torchtitan (linear/sqrt/cosine)"))
    if a.mup_base_dim:
        out.append(drifts.mup_note(full, "torchtitan 0.3", (
            f"torchtitan 0.3's default_adamw trains every parameter at one LR: the file writes "
            f"the hidden matrices' {full.hidden_lr:.4g}, so embeddings, head and norms train "
            f"at it too, not at the base LR.")))
    return out


IMPORTS = """\
from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
from torchtitan.components.optimizer import LRSchedulersContainer, default_adamw
from torchtitan.components.quantization import (Float8GroupedExpertsConverter,
                                                Float8LinearConverter)
from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
from torchtitan.models.common import RMSNorm
from torchtitan.models.common.config_utils import decoder_vocab_size
from torchtitan.models.common.moe import MoE
from torchtitan.models.deepseek_v3 import model_registry
from torchtitan.models.deepseek_v3.config_registry import (deepseek_v3_16b,
                                                           deepseek_v3_671b)
from torchtitan.models.deepseek_v3.mtp import MTPLoss
from torchtitan.trainer import Trainer
"""


def render(full: FullRun, *, module: str = DEFAULT_MODULE) -> str:
    """The config module's text, for a file named ``{module}.py``."""
    check_module_name(module)
    lines, notes = body(full)
    head = [f"# moetune export for torchtitan ({TORCHTITAN_REF})",
            *([f"# REQUIRES: {TORCHAO_NEEDED}"] if full.recipe.precision == "fp8" else []),
            f"# study {full.proxy.get('study', '?')} trial {full.proxy.get('trial', '?')}; "
            f"{full.target.gpus} x {full.target.hardware.name}, {full.target.tokens} tokens",
            f"# save as {module}.py; launch: {launch(module, full.target.gpus)}",
            f"# LR: {full.lr_line()}",
            *(f"# WARNING: {w}" for w in full.warnings),
            *(f"# NOTE: {n}" for n in notes)]
    fn = [f"def {FUNCTION}() -> Trainer.Config:",
          '    """The moetune export as torchtitan\'s Trainer.Config."""',
          *(f"    {line}" for x in lines for line in x.split("\n")), "    return config"]
    return "\n".join([*head, "", IMPORTS, "", *fn]) + "\n"


def notes(full: FullRun) -> list[str]:
    """What the file says differs from the recipe, and what it needs installed (for stderr)."""
    needs = [f"needs {TORCHAO_NEEDED}"] if full.recipe.precision == "fp8" else []
    return needs + body(full)[1]
