"""Full-scale cost model of a DeepSeek-V3-style MoE: parameters, FLOPs, memory per GPU, GPU-hours.

Everything here is *modeled*: pure functions of the architecture (`ModelArgs`), the run shape and
the hardware, with the formulas written next to the code. Notation: d = dim, L = n_layers,
h = n_heads, E = n_routed_experts, k = n_activated_experts, m = moe_inter_dim, V = vocab_size,
s = sequence length, b = micro-batch (sequences).

Parameters (bias-free linears, RMSNorm weights, untied embedding and output head):
    MLA      q: d·h·(nope+rope)  or  d·q_lora + q_lora + q_lora·h·(nope+rope);
             kv: d·(kv_lora+rope) + kv_lora + kv_lora·h·(nope+v);  out: h·v·d
    dense    3·d·inter_dim (SwiGLU w1, w2, w3)
    MoE      routed E·3·d·m, shared 3·d·(n_shared·m), gate E·d (the balancing bias is state
             updated outside the optimizer, not a parameter: E floats per MoE layer, not counted)
    block    + 2·d norm weights;  model: V·d embedding + V·d head + d final norm
    MTP      per depth: 3·d norms (hidden, embedding, output) + 2d·d projection + one MoE block
             (embedding and head shared with the main model)
Active = total − routed experts + k/E of them.

FLOPs per token (training = 3 × forward; forward = 2 per matmul weight):
    matmuls   6 · (active matmul weights, embedding lookup excluded, head included)
    attention 3 · h·(qk_head + v_head)·s per layer (QKᵀ and AV, forward 2·h·(qk+v)·s/2 causal)
    recompute + r × one forward of the blocks for checkpoint ratio r (hardware FLOPs, not model)
GPU-hours = tokens × Σ_part FLOPs_part / rate_part / MFU / 3600. rate is the bf16 peak (TF32
for fp32 recipes); under fp8 the block matmuls run at the bf16 peak × their modeled fp8
speed-up (`tuner.modeling.fp8_speed`: per GEMM shape and pass, from published kernel figures)
and the head, gate and attention core at bf16 (DeepSeek-V3 keeps them in BF16). ``MFU`` is thus
the fraction of the bf16 (TF32) peak achieved, fp8's gain counted on top of it.

Memory per GPU: see `activation_bytes_per_layer` (derived saved-tensor coefficients, the
Korthikanti et al. 2022 method applied to MLA + SwiGLU + MoE) and `memory_per_gpu`.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainers.config.model_args import ModelArgs
from tuner.modeling.fp8_speed import Fp8Speed, fp8_speed
from tuner.modeling.hardware import GIB, Hardware

# DeepSeek-V3 technical report: 2.664M H800 GPU-hours of pre-training on 14.8T tokens of 4K
# sequences. `reference_mfu()` inverts the model on these; docs/full_run.md quotes the result.
DEEPSEEK_V3_PRETRAIN_GPU_HOURS = 2.664e6
DEEPSEEK_V3_TOKENS = 14.8e12
DEEPSEEK_V3_SEQ_LEN = 4096
DEEPSEEK_V3_EP = 64  # technical report, section 3.2: 64-way expert parallelism over 8 nodes


# ---------------------------------------------------------------------------------------------
# parameters
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class ParamCount:
    """Parameter counts of the main model (MTP modules counted separately).

    ``total``/``active`` include embedding and head; ``mtp_total``/``mtp_active`` are the
    multi-token-prediction modules (their embedding and head are the main model's, not recounted).
    """

    total: int
    active: int
    embedding: int
    head: int
    attention: int
    dense_mlp: int
    routed_experts: int
    active_routed_experts: int
    shared_experts: int
    gate: int
    norms: int
    mtp_total: int
    mtp_active: int

    @property
    def non_embedding_active(self) -> int:
        return self.active - self.embedding

    @property
    def total_with_mtp(self) -> int:
        return self.total + self.mtp_total


def attention_params(a: ModelArgs) -> int:
    """Weights of one MLA block (projections and the q/kv low-rank norms)."""
    h, qk = a.n_heads, a.qk_head_dim
    if a.q_lora_rank:
        q = a.dim * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * h * qk
    else:
        q = a.dim * h * qk
    kv = (a.dim * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank
          + a.kv_lora_rank * h * (a.qk_nope_head_dim + a.v_head_dim))
    return q + kv + h * a.v_head_dim * a.dim


def dense_mlp_params(a: ModelArgs) -> int:
    return 3 * a.dim * a.inter_dim


def expert_params(a: ModelArgs) -> int:
    """One routed expert (a SwiGLU of width moe_inter_dim)."""
    return 3 * a.dim * a.moe_inter_dim


def shared_expert_params(a: ModelArgs) -> int:
    return 3 * a.dim * a.n_shared_experts * a.moe_inter_dim


def gate_params(a: ModelArgs) -> int:
    return a.n_routed_experts * a.dim


def layer_params(a: ModelArgs, *, moe: bool, active: bool = False) -> int:
    """Weights of one block; ``active`` counts only the k routed experts a token uses."""
    if not moe:
        return attention_params(a) + dense_mlp_params(a) + 2 * a.dim
    experts = a.n_activated_experts if active else a.n_routed_experts
    return (attention_params(a) + experts * expert_params(a) + shared_expert_params(a)
            + gate_params(a) + 2 * a.dim)


def mtp_module_params(a: ModelArgs, *, active: bool = False) -> int:
    """One MTP depth: three RMSNorms, the 2d→d projection and one MoE block."""
    return 3 * a.dim + 2 * a.dim * a.dim + layer_params(a, moe=True, active=active)


def count_params(a: ModelArgs) -> ParamCount:
    """Count parameters from the architecture.

    Example:
        >>> c = count_params(ModelArgs.from_json("config_671B.json"))  # doctest: +SKIP
        >>> round(c.total / 1e9), round(c.active / 1e9, 1)
        (671, 37.6)
    """
    n_moe, n_dense = a.n_moe_layers, a.n_dense_layers
    embedding = head = a.vocab_size * a.dim
    routed = n_moe * a.n_routed_experts * expert_params(a)
    active_routed = n_moe * a.n_activated_experts * expert_params(a)
    total = (embedding + head + a.dim + n_dense * layer_params(a, moe=False)
             + n_moe * layer_params(a, moe=True))
    return ParamCount(
        total=total, active=total - routed + active_routed, embedding=embedding, head=head,
        attention=a.n_layers * attention_params(a), dense_mlp=n_dense * dense_mlp_params(a),
        routed_experts=routed, active_routed_experts=active_routed,
        shared_experts=n_moe * shared_expert_params(a), gate=n_moe * gate_params(a),
        norms=2 * a.dim * a.n_layers + a.dim,
        mtp_total=a.mtp_depth * mtp_module_params(a),
        mtp_active=a.mtp_depth * mtp_module_params(a, active=True),
    )


# ---------------------------------------------------------------------------------------------
# FLOPs
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class FlopsPerToken:
    """Training FLOPs per token, split by the rate they run at.

    ``block_matmul``: linears inside blocks (fp8-eligible); ``bf16_matmul``: head and gates;
    ``attention``: the QKᵀ/AV core; ``recompute``: the extra forward of recomputed blocks.
    ``model`` (= all but recompute) is what MFU conventionally counts.
    """

    block_matmul: float
    bf16_matmul: float
    attention: float
    recompute: float

    @property
    def model(self) -> float:
        return self.block_matmul + self.bf16_matmul + self.attention

    @property
    def total(self) -> float:
        return self.model + self.recompute


def attention_flops_per_layer(a: ModelArgs, seq_len: int) -> float:
    """Training FLOPs per token of one layer's attention core (causal: half the keys)."""
    return 3.0 * a.n_heads * (a.qk_head_dim + a.v_head_dim) * seq_len


def _block_matmul_weights(a: ModelArgs, *, moe: bool) -> int:
    """Active matmul weights of a block, without norms and gate (the gate is counted in bf16)."""
    norms = 2 * a.dim + (a.q_lora_rank + a.kv_lora_rank)
    w = layer_params(a, moe=moe, active=True) - norms
    return w - gate_params(a) if moe else w


def flops_per_token(a: ModelArgs, seq_len: int, *, checkpoint_ratio: float = 0.0,
                    include_mtp: bool = True) -> FlopsPerToken:
    """Training FLOPs per token of the whole model (formulas in the module docstring).

    MTP depth D adds, per depth, one MoE block, its 2d→d projection and one more pass through
    the shared output head.
    """
    depth = a.mtp_depth if include_mtp else 0
    n_moe = a.n_moe_layers + depth
    blocks = (a.n_dense_layers * _block_matmul_weights(a, moe=False)
              + n_moe * _block_matmul_weights(a, moe=True) + depth * 2 * a.dim * a.dim)
    bf16 = (1 + depth) * a.vocab_size * a.dim + n_moe * a.n_routed_experts * a.dim
    attn = (a.n_layers + depth) * attention_flops_per_layer(a, seq_len)
    # recompute repeats the blocks' forward (1/3 of their training FLOPs), not the head's
    recompute = checkpoint_ratio * (2.0 * blocks + attn / 3.0)
    return FlopsPerToken(block_matmul=6.0 * blocks, bf16_matmul=6.0 * bf16, attention=attn,
                         recompute=recompute)


def non_embedding_flops_per_token(a: ModelArgs, seq_len: int) -> float:
    """DeepSeek LLM's M: non-embedding (and non-head) training FLOPs per token incl. attention.

    Used by the compute law C = M·D. MTP is excluded (the law was fit without it).
    """
    f = flops_per_token(a, seq_len, include_mtp=False)
    return f.model - 6.0 * a.vocab_size * a.dim


def gpu_seconds_per_token(f: FlopsPerToken, hw: Hardware, precision: str, mfu: float, *,
                          fp8: Fp8Speed | None = None) -> float:
    """GPU-seconds per training token: Σ FLOPs_part / rate_part, divided by MFU.

    fp32 runs everything at the TF32 peak, bf16 at the bf16 peak; fp8 runs the block matmuls
    at the bf16 peak × ``fp8.train`` (their recomputed forward × ``fp8.forward``), head, gate
    and attention core at bf16.

    Raises:
        ValueError: mfu outside (0, 1], fp8 without ``fp8`` or on a part without fp8 cores.
    """
    if not 0.0 < mfu <= 1.0:
        raise ValueError(f"mfu: must be in (0, 1], but got mfu={mfu!r}.")
    if precision != "fp8":
        rate = hw.peak_tflops(precision) * 1e12  # fp32 → TF32; raises on an unknown name
        return f.total / rate / mfu
    hw.peak_tflops("fp8")  # a part without fp8 tensor cores cannot run the recipe
    if fp8 is None:
        raise ValueError("fp8: an fp8 recipe needs its modeled speed-up "
                         "(tuner.modeling.fp8_speed.fp8_speed), but got fp8=None.")
    bf16 = hw.peak_tflops("bf16") * 1e12
    return (f.block_matmul / fp8.train + f.recompute / fp8.forward
            + f.bf16_matmul + f.attention) / bf16 / mfu


def run_fp8_speed(a: ModelArgs, hw: Hardware, precision: str, *, seq_len: int,
                  micro_batch: int = 1, ep: int = 1, tp: int = 1) -> Fp8Speed | None:
    """The modeled fp8 speed of ``a`` under a layout, or None for a recipe that is not fp8."""
    if precision != "fp8":
        return None
    return fp8_speed(a, hw, tokens=seq_len * micro_batch, ep=ep, tp=tp)


def gpu_hours(a: ModelArgs, *, tokens: float, seq_len: int, hw: Hardware, precision: str,
              mfu: float, checkpoint_ratio: float = 0.0, micro_batch: int = 1, ep: int = 1,
              tp: int = 1) -> float:
    """Modeled GPU-hours to train ``tokens`` tokens (compute only; communication not modeled).

    ``micro_batch``, ``ep`` and ``tp`` set the GEMM shapes an fp8 recipe's speed-up is
    modeled at (`tuner.modeling.fp8_speed.block_gemms`); bf16 and fp32 do not depend on them.
    """
    f = flops_per_token(a, seq_len, checkpoint_ratio=checkpoint_ratio)
    fp8 = run_fp8_speed(a, hw, precision, seq_len=seq_len, micro_batch=micro_batch, ep=ep,
                        tp=tp)
    return tokens * gpu_seconds_per_token(f, hw, precision, mfu, fp8=fp8) / 3600.0


def step_time_s(a: ModelArgs, *, global_batch: int, seq_len: int, gpus: int, hw: Hardware,
                precision: str, mfu: float, checkpoint_ratio: float = 0.0,
                micro_batch: int = 1, ep: int = 1, tp: int = 1) -> float:
    """Modeled seconds per optimizer step of ``global_batch`` sequences on ``gpus`` GPUs."""
    f = flops_per_token(a, seq_len, checkpoint_ratio=checkpoint_ratio)
    fp8 = run_fp8_speed(a, hw, precision, seq_len=seq_len, micro_batch=micro_batch, ep=ep,
                        tp=tp)
    return global_batch * seq_len * gpu_seconds_per_token(f, hw, precision, mfu, fp8=fp8) / gpus


def reference_mfu(a: ModelArgs, hw: Hardware, *, precision: str = "fp8",
                  gpu_hours_reported: float = DEEPSEEK_V3_PRETRAIN_GPU_HOURS,
                  tokens: float = DEEPSEEK_V3_TOKENS, seq_len: int = DEEPSEEK_V3_SEQ_LEN,
                  ep: int = DEEPSEEK_V3_EP) -> float:
    """The MFU at which `gpu_hours` reproduces a reported run (default: DeepSeek-V3 on H800,
    fp8 at its published 64-way expert parallelism, one 4K sequence per micro-batch)."""
    f = flops_per_token(a, seq_len)
    fp8 = run_fp8_speed(a, hw, precision, seq_len=seq_len, ep=ep)
    seconds = gpu_seconds_per_token(f, hw, precision, 1.0, fp8=fp8)
    return tokens * seconds / (gpu_hours_reported * 3600.0)


# ---------------------------------------------------------------------------------------------
# activation memory
# ---------------------------------------------------------------------------------------------

def attention_activation_elements(a: ModelArgs) -> dict[str, int]:
    """Elements per token that one MLA block saves for backward (activation dtype).

    Derived by listing what each op's backward needs, flash attention assumed (no s² term):
    the block input (RMSNorm), the normed input (wq/wq_a and wkv_a), the q low-rank pair
    (q_norm input and wq_b input), the kv low-rank pair (kv_norm input and wkv_b input), the
    rope key, q and k and v for the attention core, and the core's output (wo input).
    """
    h = a.n_heads
    e = {"norm_input": a.dim, "normed_input": a.dim,
         "kv_latent": 2 * a.kv_lora_rank, "k_rope": a.qk_rope_head_dim,
         "q": h * a.qk_head_dim, "k": h * a.qk_head_dim, "v": h * a.v_head_dim,
         "attn_out": h * a.v_head_dim}
    if a.q_lora_rank:
        e["q_latent"] = 2 * a.q_lora_rank
    return e


def mlp_activation_elements(a: ModelArgs, *, moe: bool) -> dict[str, int]:
    """Elements per token one FFN (dense SwiGLU or MoE) saves for backward (activation dtype).

    A SwiGLU of width w saves its input, w1·x (for silu'), silu(w1·x) and w3·x (for the
    product) and the product (w2 input): d + 4w. The MoE sends each token to k experts, so
    it saves k copies of the dispatched input and of each expert's output (for the weighted
    combine), plus the shared expert; routing scores are fp32 (`mlp_fp32_elements`).
    """
    if not moe:
        return {"norm_input": a.dim, "normed_input": a.dim, "swiglu": 4 * a.inter_dim}
    k = a.n_activated_experts
    return {"norm_input": a.dim, "normed_input": a.dim,
            "routed_inputs": k * a.dim, "routed_swiglu": k * 4 * a.moe_inter_dim,
            "routed_outputs": k * a.dim,
            "shared_swiglu": 4 * a.n_shared_experts * a.moe_inter_dim}


def mlp_fp32_elements(a: ModelArgs, *, moe: bool) -> dict[str, int]:
    """fp32 elements per token saved by the router (scores and the combine weights)."""
    if not moe:
        return {}
    return {"router_scores": a.n_routed_experts, "combine_weights": a.n_activated_experts}


def activation_bytes_per_layer(a: ModelArgs, seq_len: int, micro_batch: int, dtype_bytes: int,
                               *, moe: bool = True, tensor_parallel: int = 1,
                               recompute: bool = False, score_tensors: int = 0) -> float:
    """Bytes one block keeps for backward for one micro-batch.

    Not recomputed: s·b·(Σ coefficients·dtype_bytes + Σ fp32 coefficients·4) / t.
    Recomputed (full block checkpoint): s·b·d·dtype_bytes / t (the block input only).
    With tensor parallelism t, sequence parallelism is assumed, so every term divides by t.
    ``score_tensors``: attention-score tensors of h·s elements per token an eager (non-flash)
    attention keeps (Korthikanti's s² term); 0 for flash attention, the full-scale default.
    """
    tokens = seq_len * micro_batch
    if recompute:
        return tokens * a.dim * dtype_bytes / tensor_parallel
    elems = (sum(attention_activation_elements(a).values())
             + sum(mlp_activation_elements(a, moe=moe).values())
             + score_tensors * a.n_heads * seq_len)
    fp32 = sum(mlp_fp32_elements(a, moe=moe).values())
    return tokens * (elems * dtype_bytes + fp32 * 4) / tensor_parallel


def head_activation_bytes(a: ModelArgs, seq_len: int, micro_batch: int, dtype_bytes: int,
                          *, tensor_parallel: int = 1) -> float:
    """Final norm input and output (2d, activation dtype) and fp32 log-softmax output (V)."""
    return seq_len * micro_batch * (2 * a.dim * dtype_bytes + 4 * a.vocab_size) / tensor_parallel


def recomputed_layers(n_layers: int, checkpoint_ratio: float) -> int:
    """Number of blocks recomputed for a checkpoint ratio (rounded to whole blocks)."""
    return min(n_layers, round(checkpoint_ratio * n_layers))


def model_activation_bytes(a: ModelArgs, seq_len: int, micro_batch: int, dtype_bytes: int, *,
                           checkpoint_ratio: float = 0.0, include_mtp: bool = True,
                           score_tensors: int = 0) -> float:
    """Saved-activation bytes of the whole model for one micro-batch on one device.

    The quantity a proxy run measures as ``TrainResult.activation_bytes`` (at ratio 0).
    Recomputed blocks are taken in proportion from dense and MoE blocks; while one is
    recomputed its full activations exist again, so the largest block is added once.
    """
    depth = a.mtp_depth if include_mtp else 0
    per = {moe: activation_bytes_per_layer(a, seq_len, micro_batch, dtype_bytes, moe=moe,
                                           score_tensors=score_tensors)
           for moe in (False, True)}
    kept = 1.0 - recomputed_layers(a.n_layers, checkpoint_ratio) / a.n_layers
    blocks = a.n_dense_layers * per[False] + a.n_moe_layers * per[True]
    ckpt = activation_bytes_per_layer(a, seq_len, micro_batch, dtype_bytes, recompute=True)
    total = kept * blocks + (1.0 - kept) * a.n_layers * ckpt
    if kept < 1.0:
        total += per[True] if a.n_moe_layers else per[False]
    # each MTP depth: one MoE block, its 2d concat input, and its own head pass
    mtp = depth * (per[True] + 2 * a.dim * dtype_bytes * seq_len * micro_batch
                   + head_activation_bytes(a, seq_len, micro_batch, dtype_bytes))
    return total + mtp + head_activation_bytes(a, seq_len, micro_batch, dtype_bytes)


# ---------------------------------------------------------------------------------------------
# memory per GPU under a parallel layout
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class ParallelPlan:
    """Parallel degrees: world = tp·pp·dp; experts split over ep ranks drawn from tp·dp.

    Expert tensor parallelism is 1 (each expert whole on one GPU), as in DeepSeek-V3.
    """

    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp: int = 1

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "ep", "dp"):
            v = getattr(self, name)
            if not (isinstance(v, int) and v >= 1):
                raise ValueError(f"ParallelPlan.{name}: must be a positive integer, but got "
                                 f"{name}={v!r}.")
        if (self.tp * self.dp) % self.ep:
            raise ValueError(f"ParallelPlan.ep: must divide tp*dp={self.tp * self.dp}, but got "
                             f"ep={self.ep}.")

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def expert_dp(self) -> int:
        """Data-parallel replicas of each expert (its optimizer state shards over these)."""
        return self.tp * self.dp // self.ep


@dataclass(frozen=True, kw_only=True)
class OptimizerBytes:
    """Bytes per parameter of mixed-precision AdamW.

    Default (bf16/fp8 recipes): bf16 weights 2, fp32 gradients 4, fp32 master 4, fp32 moments
    8 — Megatron-LM's layout. DeepSeek-V3 keeps the moments in bf16 (moments=4). With
    ``distributed`` the master weights and moments shard over data-parallel replicas (ZeRO-1).
    """

    weights: int = 2
    grads: int = 4
    master: int = 4
    moments: int = 8
    distributed: bool = True

    @classmethod
    def for_precision(cls, precision: str, *, distributed: bool = True) -> OptimizerBytes:
        if precision == "fp32":
            return cls(weights=4, grads=4, master=0, moments=8, distributed=distributed)
        return cls(distributed=distributed)


@dataclass(frozen=True, kw_only=True)
class MemoryEstimate:
    """Modeled peak bytes on the busiest GPU (the pipeline stage with the largest total)."""

    weights: float
    grads: float
    optimizer: float
    activations: float
    stage: int

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + self.activations

    @property
    def total_gib(self) -> float:
        return self.total / GIB


def activation_dtype_bytes(precision: str) -> int:
    """Bytes per saved activation: 4 for fp32 recipes, else 2 (fp8 recipes cache bf16 here)."""
    return 4 if precision == "fp32" else 2


def stage_layers(n_layers: int, pp: int) -> list[range]:
    """Block indices per pipeline stage: the middle stages hold k blocks each, the first and
    the last share the rest (the last takes the smaller half, it also holds the head and MTP).

    k = min(ceil(L/pp), floor((L-2)/(pp-2))), so no stage holds more than ceil(L/pp) blocks and
    the first and last each hold at least one. This is the split Megatron-LM can express:
    ``--decoder-first/last-pipeline-num-layers`` with the middle layers divisible by pp - 2
    (NVIDIA/Megatron-LM@d98e8a64, ``TransformerConfig.__post_init__``). 61 blocks on 16
    stages: 3, 4 x 14, 2.

    Raises:
        ValueError: pp < 1 or pp > n_layers (a stage without blocks).
    """
    if not 1 <= pp <= n_layers:
        raise ValueError(f"pp: must be in [1, n_layers={n_layers}] (every pipeline stage "
                         f"holds a block), but got pp={pp}.")
    if pp == 1:
        return [range(n_layers)]
    k = 0 if pp == 2 else min(-(-n_layers // pp), (n_layers - 2) // (pp - 2))
    rest = n_layers - (pp - 2) * k
    first = -(-rest // 2)
    sizes = [first, *([k] * (pp - 2)), rest - first]
    bounds = [sum(sizes[:i]) for i in range(pp + 1)]
    return [range(bounds[i], bounds[i + 1]) for i in range(pp)]


def _stage_params(a: ModelArgs, layers: range, *, first: bool, last: bool) -> tuple[int, int]:
    """(non-expert, routed-expert) parameters held by one pipeline stage."""
    dense = expert = 0
    for i in layers:
        moe = i >= a.n_dense_layers
        p = layer_params(a, moe=moe)
        routed = a.n_routed_experts * expert_params(a) if moe else 0
        dense, expert = dense + p - routed, expert + routed
    if first:
        dense += a.vocab_size * a.dim
    if last:
        dense += a.vocab_size * a.dim + a.dim
        mtp_routed = a.n_routed_experts * expert_params(a)
        dense += a.mtp_depth * (mtp_module_params(a) - mtp_routed)
        expert += a.mtp_depth * mtp_routed
    return dense, expert


def _stage_activations(a: ModelArgs, layers: range, *, last: bool, seq_len: int,
                       micro_batch: int, precision: str, tp: int, in_flight: int,
                       checkpoint_ratio: float) -> float:
    dt = activation_dtype_bytes(precision)
    per = {moe: activation_bytes_per_layer(a, seq_len, micro_batch, dt, moe=moe,
                                           tensor_parallel=tp) for moe in (False, True)}
    ckpt = activation_bytes_per_layer(a, seq_len, micro_batch, dt, tensor_parallel=tp,
                                      recompute=True)
    n = len(layers)
    n_recomputed = recomputed_layers(n, checkpoint_ratio)
    full = sorted((per[i >= a.n_dense_layers] for i in layers), reverse=True)
    # recompute the largest blocks first: the ratio buys the most memory that way
    kept = sum(full[n_recomputed:]) + n_recomputed * ckpt
    act = in_flight * kept + (full[0] if n_recomputed else 0.0)
    if last:
        act += a.mtp_depth * per[True] + head_activation_bytes(
            a, seq_len, micro_batch, dt, tensor_parallel=tp) * (1 + a.mtp_depth)
    return act


def memory_per_gpu(a: ModelArgs, plan: ParallelPlan, *, seq_len: int, micro_batch: int = 1,
                   precision: str = "bf16", checkpoint_ratio: float = 0.0,
                   optimizer: OptimizerBytes | None = None) -> MemoryEstimate:
    """Modeled peak memory of the busiest GPU.

    Per stage: non-expert weights / tp and routed experts / ep; gradients alike; optimizer
    state (master + moments) further / dp for non-expert and / expert_dp for experts when
    distributed. Activations: with 1F1B, stage i holds pp − i micro-batches in flight
    (Korthikanti et al.: the first stage holds pp), each of its blocks recomputed or not.
    Not modeled: communication buffers, allocator fragmentation, CUDA context (keep a margin:
    the planner targets a fraction of memory).
    """
    opt = optimizer or OptimizerBytes.for_precision(precision)
    stages = stage_layers(a.n_layers, plan.pp)
    best: MemoryEstimate | None = None
    for i, layers in enumerate(stages):
        first, last = i == 0, i == plan.pp - 1
        dense, expert = _stage_params(a, layers, first=first, last=last)
        local = dense / plan.tp + expert / plan.ep
        state_div = (plan.dp, plan.expert_dp) if opt.distributed else (1, 1)
        state = (opt.master + opt.moments) * (dense / plan.tp / state_div[0]
                                              + expert / plan.ep / state_div[1])
        if not layers and not first and not last:
            continue
        act = (_stage_activations(a, layers, last=last, seq_len=seq_len, micro_batch=micro_batch,
                                  precision=precision, tp=plan.tp, in_flight=plan.pp - i,
                                  checkpoint_ratio=checkpoint_ratio) if layers or last else 0.0)
        est = MemoryEstimate(weights=opt.weights * local, grads=opt.grads * local,
                             optimizer=state, activations=act, stage=i)
        if best is None or est.total > best.total:
            best = est
    assert best is not None
    return best


def fits(est: MemoryEstimate, hw: Hardware, fraction: float) -> bool:
    """Whether an estimate fits within ``fraction`` of the GPU's memory."""
    return est.total <= fraction * hw.memory_bytes

