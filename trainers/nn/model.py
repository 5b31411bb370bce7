"""The DeepSeek-V3-style MoE transformer, bottom-up: norm → RoPE → MLA → block → MTP → model.

Training forward over a full causal sequence (no KV cache). Shapes in comments:
B batch, T sequence, D dim, H heads, V vocab, R rope head dim.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from trainers.config.model_args import ModelArgs
from trainers.nn import fusion
from trainers.nn.attention import causal_attention
from trainers.nn.fp8 import Backend, Fp8Linear
from trainers.nn.head_loss import FUSED_MIN_VOCAB, linear_cross_entropy
from trainers.nn.mlp import MLP
from trainers.nn.moe import Gate, MoE, RoutedExperts

Rope = torch.Tensor  # e^{iθ} of the rope angles, (T, R/2) complex64, computed once per forward
# a block's (output, balance loss or None, expert load or None); both None for a dense block
BlockOutput = tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32 whatever the autocast dtype: small-norm tokens underflow in bf16.
        if fusion.active(x):  # the same math as one fused kernel each way
            out: torch.Tensor = fusion.rms_norm(x, self.weight, self.eps)
            return out
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight * y).to(x.dtype)


def rope_frequencies(args: ModelArgs, seq_len: int) -> torch.Tensor:
    """Rotation angles (T, R/2) for the decoupled rope part, YaRN-corrected like upstream when the
    configured context (max_seq_len) exceeds the pre-training one (original_seq_len)."""
    r = args.qk_rope_head_dim
    freqs = 1.0 / (args.rope_theta ** (torch.arange(0, r, 2, dtype=torch.float32) / r))
    if args.max_seq_len > args.original_seq_len:
        low, high = _yarn_correction_range(args, r)
        ramp = torch.clamp((torch.arange(r // 2, dtype=torch.float32) - low)
                           / max(high - low, 1e-3), 0, 1)
        smooth = 1 - ramp
        freqs = freqs / args.rope_factor * (1 - smooth) + freqs * smooth
    return torch.outer(torch.arange(seq_len, dtype=torch.float32), freqs)


def _yarn_correction_range(args: ModelArgs, r: int) -> tuple[int, int]:
    def dim_for(rotations: float) -> float:
        return r * math.log(args.original_seq_len / (rotations * 2 * math.pi)) / (
            2 * math.log(args.rope_theta))
    low = math.floor(dim_for(args.beta_fast))
    high = math.ceil(dim_for(args.beta_slow))
    return max(low, 0), min(high, r - 1)


def apply_rope(x: torch.Tensor, rope: Rope) -> torch.Tensor:
    """Rotate interleaved pairs (x0, x1), (x2, x3), … of x (B, T, H, R) by the angles e^{iθ}
    (T, R/2): one complex multiply, which on CPU is about 3x the speed of the same rotation
    written with real strided ops (the pairs are interleaved, so x0 and x1 have stride 2).
    With `fusion.active`, the same rotation in real arithmetic, fused (`fusion.rope`)."""
    if fusion.active(x):
        out: torch.Tensor = fusion.rope(x, torch.view_as_real(rope))
        return out
    pairs = x.float().reshape(*x.shape[:-1], -1, 2)
    if pairs.storage_offset() % 2 or any(s % 2 for s in pairs.stride()[:-1]):
        pairs = pairs.contiguous()  # a slice at an odd offset (odd head dims) has no complex view
    xc = torch.view_as_complex(pairs)  # (B, T, H, R/2)
    return torch.view_as_real(xc * rope[None, :, None, :]).flatten(-2).to(x.dtype)


class MLA(nn.Module):
    """Multi-head latent attention: low-rank KV (and optionally Q) with a decoupled rope key
    shared by all heads."""

    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.args = args
        h, d = args.n_heads, args.dim
        if args.q_lora_rank == 0:
            self.wq = Fp8Linear(d, h * args.qk_head_dim)
        else:
            self.wq_a = Fp8Linear(d, args.q_lora_rank)
            self.q_norm = RMSNorm(args.q_lora_rank, args.norm_eps)
            self.wq_b = Fp8Linear(args.q_lora_rank, h * args.qk_head_dim)
        self.wkv_a = Fp8Linear(d, args.kv_lora_rank + args.qk_rope_head_dim)
        self.kv_norm = RMSNorm(args.kv_lora_rank, args.norm_eps)
        self.wkv_b = Fp8Linear(args.kv_lora_rank, h * (args.qk_nope_head_dim + args.v_head_dim))
        self.wo = Fp8Linear(h * args.v_head_dim, d)
        self.softmax_scale = args.qk_head_dim ** -0.5
        if args.max_seq_len > args.original_seq_len:
            mscale = 0.1 * args.mscale * math.log(args.rope_factor) + 1.0
            self.softmax_scale *= mscale * mscale

    def forward(self, x_BTD: torch.Tensor, rope: Rope) -> torch.Tensor:
        a = self.args
        b, t, _ = x_BTD.shape
        q = self.wq(x_BTD) if a.q_lora_rank == 0 else self.wq_b(self.q_norm(self.wq_a(x_BTD)))
        q = q.view(b, t, a.n_heads, a.qk_head_dim)
        kv, k_pe = self.wkv_a(x_BTD).split([a.kv_lora_rank, a.qk_rope_head_dim], dim=-1)
        k_pe = apply_rope(k_pe.unsqueeze(2), rope)  # (B, T, 1, R): one rope key for all heads
        kv = self.wkv_b(self.kv_norm(kv)).view(b, t, a.n_heads, -1)
        k_nope, v = kv.split([a.qk_nope_head_dim, a.v_head_dim], dim=-1)
        if a.qk_nope_head_dim % 2 == 0:
            # rotate the whole head, the nope part by angle 0: one op instead of split + cat
            unrotated = rope.new_ones(t, a.qk_nope_head_dim // 2)
            q = apply_rope(q, torch.cat([unrotated, rope], dim=-1))
        else:
            q_nope, q_pe = q.split([a.qk_nope_head_dim, a.qk_rope_head_dim], dim=-1)
            q = torch.cat([q_nope, apply_rope(q_pe, rope)], dim=-1)
        # k is assembled head-major, the layout the attention core reads: one copy, not two
        k_pe = k_pe.transpose(1, 2).expand(-1, a.n_heads, -1, -1).to(k_nope.dtype)
        k = torch.cat([k_nope.transpose(1, 2), k_pe], dim=-1)
        out = causal_attention(q.transpose(1, 2), k, v.transpose(1, 2), self.softmax_scale)
        # (B, H, T, Dv) → (B, T, H·Dv)
        y: torch.Tensor = self.wo(out.transpose(1, 2).reshape(b, t, -1))
        return y


class Block(nn.Module):
    """Pre-norm block: x + MLA(norm(x)), then + FFN(norm(x)); FFN dense or MoE by layer."""

    def __init__(self, args: ModelArgs, moe: bool) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(args.dim, args.norm_eps)
        self.attn = MLA(args)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps)
        self.ffn = MoE(args) if moe else MLP(args.dim, args.inter_dim)
        self.checkpoint = False  # recompute this block in backward (set by the trainer)

    def forward(self, x: torch.Tensor, rope: Rope) -> BlockOutput:
        """Returns (output, balance loss or None, expert load or None)."""
        x = x + self.attn(self.attn_norm(x), rope)
        if isinstance(self.ffn, MoE):
            y, balance, load = self.ffn(self.ffn_norm(x))
            return x + y, balance, load
        return x + self.ffn(self.ffn_norm(x)), None, None


class MTPModule(nn.Module):
    """One MTP depth: combine h^{k-1}_i with Emb(t_{i+k}), one block, the shared head."""

    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.hidden_norm = RMSNorm(args.dim, args.norm_eps)
        self.embed_norm = RMSNorm(args.dim, args.norm_eps)
        self.proj = Fp8Linear(2 * args.dim, args.dim)
        self.block = Block(args, moe=args.n_dense_layers < args.n_layers)
        self.norm = RMSNorm(args.dim, args.norm_eps)

    def forward(self, h_prev: torch.Tensor, emb_next: torch.Tensor,
                rope: Rope) -> BlockOutput:
        x = self.proj(torch.cat([self.hidden_norm(h_prev), self.embed_norm(emb_next)], dim=-1))
        out: BlockOutput = self.block(x, rope)
        return out


@dataclass
class ModelOutput:
    hidden: torch.Tensor  # (B, T, D): the final norm's output, what the head reads
    mtp_hidden: list[torch.Tensor]  # depth k: (B, T-k, D), predicts token i+k+1 at position i
    balance_loss: torch.Tensor  # sum over MoE layers of the sequence-wise balance loss (×α later)
    loads: list[torch.Tensor]  # per MoE layer (main blocks, then MTP blocks): tokens per expert
    head: Callable[[torch.Tensor], torch.Tensor]  # hidden -> logits (the model's `logits`)

    # The logits are made when asked for: the training loss reads the hidden states through
    # trainers.nn.head_loss at a large vocabulary and never holds (B, T, V) floats.
    @property
    def logits(self) -> torch.Tensor:  # (B, T, V)
        return self.head(self.hidden)


class Transformer(nn.Module):
    """DeepSeek-V3-style MoE language model with optional MTP modules.

    Example:
        >>> model = Transformer(ModelArgs(dim=64, n_layers=2, vocab_size=256, ...))
        >>> out = model(tokens_BT)
    """

    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.args = args
        self.embed = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList(
            Block(args, moe=i >= args.n_dense_layers) for i in range(args.n_layers))
        self.norm = RMSNorm(args.dim, args.norm_eps)
        self.head = nn.Linear(args.dim, args.vocab_size, bias=False)
        self.mtp = nn.ModuleList(MTPModule(args) for _ in range(args.mtp_depth))
        self._rope_cache: dict[tuple[int, str], Rope] = {}
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Normal(0, init_std); with µP, hidden matrices use init_std / sqrt(width_mult)."""
        a = self.args
        hidden_std = a.init_std / math.sqrt(a.width_mult)
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                nn.init.ones_(p)
            elif name.startswith(("embed.", "head.")):
                nn.init.normal_(p, std=a.init_std)
            else:
                nn.init.normal_(p, std=hidden_std)

    def set_precision(self, *, fp8: Backend | None) -> None:
        """Run the blocks' Linears (and routed experts) through an fp8 back end, or not."""
        for m in self.modules():
            if isinstance(m, (Fp8Linear, RoutedExperts)):
                m.fp8 = fp8

    def compile_blocks(self) -> None:
        """`torch.compile` every block (main and MTP) whole: ``MOETUNE_FUSION=blocks``."""
        for block in [*self.layers, *(m.block for m in self.mtp if isinstance(m, MTPModule))]:
            block.compile()

    def set_checkpointing(self, ratio: float) -> list[int]:
        """Recompute `ratio` of the blocks in backward, spread evenly; returns their indices."""
        chosen = checkpointed_layers(len(self.layers), ratio)
        for i, block in enumerate(self.layers):
            assert isinstance(block, Block)
            block.checkpoint = i in chosen
        return sorted(chosen)

    def forward(self, tokens_BT: torch.Tensor, *, mtp: bool = True) -> ModelOutput:
        """`mtp=False` skips the MTP modules (evaluation only needs the main head)."""
        t = tokens_BT.shape[1]
        rope = self._rope(t, tokens_BT.device)
        emb = self.embed(tokens_BT)
        h, balance = emb, emb.new_zeros(())
        loads: list[torch.Tensor] = []
        for block in self.layers:
            assert isinstance(block, Block)
            h, bal, load = self._run_block(block, h, rope)
            if bal is not None and load is not None:  # an MoE block (a dense one has neither)
                balance, loads = balance + bal, loads + [load]
        hidden = self.norm(h)
        mtp_hidden = []
        modules: Iterable[nn.Module] = self.mtp if mtp else []
        for k, module in enumerate(modules, start=1):
            assert isinstance(module, MTPModule)
            h, bal, load = module(h[:, :-1], emb[:, k:], rope[: t - k])
            if bal is not None and load is not None:
                balance, loads = balance + bal, loads + [load]
            mtp_hidden.append(module.norm(h))
        return ModelOutput(hidden, mtp_hidden, balance, loads, self.logits)

    def _rope(self, t: int, device: torch.device) -> Rope:
        """e^{iθ} (T, R/2) on `device`, shared by every layer; computed once per length."""
        key = (t, str(device))
        if key not in self._rope_cache:
            angles = rope_frequencies(self.args, t).to(device)
            self._rope_cache[key] = torch.polar(torch.ones_like(angles), angles)
        return self._rope_cache[key]

    def _run_block(self, block: Block, h: torch.Tensor, rope: Rope) -> BlockOutput:
        out: BlockOutput
        if block.checkpoint and self.training and torch.is_grad_enabled():
            out = checkpoint(block, h, rope, use_reentrant=False)
        else:
            out = block(h, rope)
        return out

    @property
    def logit_scale(self) -> float:
        """µP: output logits × 1/width_mult so the readout does not blow up with width."""
        return 1.0 / self.args.width_mult if self.args.mup_base_dim else 1.0

    def logits(self, h_normed: torch.Tensor) -> torch.Tensor:
        """The head: (..., D) final hidden states to (..., V) logits."""
        logits: torch.Tensor = self.head(h_normed)
        return logits / self.args.width_mult if self.args.mup_base_dim else logits

    def head_loss(self, h_normed_BTD: torch.Tensor, targets_BT: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy of the head on these hidden states. At a vocabulary of
        FUSED_MIN_VOCAB or more the logits are never held whole (trainers.nn.head_loss)."""
        h, t = h_normed_BTD.flatten(0, 1), targets_BT.flatten()
        if self.args.vocab_size >= FUSED_MIN_VOCAB:
            return linear_cross_entropy(h, self.head.weight, t, self.logit_scale)
        return F.cross_entropy(self.logits(h).float(), t)

    def moe_gates(self) -> list[Gate]:
        """Gates in the order of ModelOutput.loads."""
        blocks = list(self.layers) + [m.block for m in self.mtp if isinstance(m, MTPModule)]
        return [b.ffn.gate for b in blocks if isinstance(b, Block) and isinstance(b.ffn, MoE)]


def checkpointed_layers(n_layers: int, ratio: float) -> set[int]:
    """Indices of round(ratio·n) blocks spread evenly over depth."""
    n = round(ratio * n_layers)
    return {int((i + 0.5) * n_layers / n) for i in range(n)} if n else set()
