"""Causal attention core for MLA: q/k and v head dims differ (DeepSeek-V3: 192 vs 128).

Three implementations, chosen by device, sequence length and whether a compiler is at hand:

- CPU, T <= FUSED_MAX_SEQ: `FusedCausalAttention` (trainers/nn/fused_attention.py), a C++ kernel
  built for this CPU at first use: one (batch, head) problem per thread at a time, all of
  forward and backward on data in that core's cache, only the causal triangle computed.
- CPU, T <= BLOCKED_MAX_SEQ, when the fused kernel cannot be built (no compiler):
  `BlockedCausalAttention`, the same exact attention from PyTorch ops, a cache-sized block of
  heads at a time with batched GEMMs.
  Both recompute the probabilities in backward instead of keeping the (T, T) matrices
  (flash-style memory: only q, k, v are saved). At the proxies' short sequences and small heads
  PyTorch's CPU flash kernel is bound by per-tile overhead; these are faster there
  (benchmarks/RESULTS.md, "Attention core").
- Otherwise: `F.scaled_dot_product_attention` with the narrower side zero-padded to one head dim,
  which fused (flash) kernels require; zeros change neither q·k nor the output's useful columns.

All take (B, H, T, ·) tensors, any strides, and return (B, H, T, Dv).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from trainers.nn import fused_attention
from trainers.nn.fused_attention import FusedCausalAttention

# bench_attention.py, proxy-s heads, fwd + bwd: the fused kernel beats SDPA's CPU flash kernel
# 1.9-2.4x at 1024 tokens, 1.0-1.3x at 2048 (bf16-fp32), and loses at 4096, where each
# thread's two (T, T) fp32 scratch matrices (64 MiB each) are far out of cache.
FUSED_MAX_SEQ = 2048
# The blocked kernel is faster than flash at 128-512 tokens, equal or slower at 1024.
BLOCKED_MAX_SEQ = 512
# Elements of one block's (heads, query rows, keys) score tensor: 1 MiB in fp32, so a block's
# scores, probabilities and their gradients stay in cache between the GEMMs that use them
# (2^15..2^20 measured at proxy-s shapes: 2^17 and 2^18 fastest, 2^15 and 2^20 30-50% slower;
# query blocks of 64 rows at 128 tokens did not pay for their doubled op count).
_BLOCK_ELEMENTS = 1 << 18
_ROWS = 128  # query rows per block


def cpu_kernel(device_type: str, seq_len: int) -> str | None:
    """Which of our kernels `causal_attention` runs here: "fused", "blocked", or None (SDPA)."""
    if device_type != "cpu":
        return None
    if seq_len <= FUSED_MAX_SEQ and fused_attention.library() is not None:
        return "fused"
    return "blocked" if seq_len <= BLOCKED_MAX_SEQ else None


def describe(device_type: str, seq_len: int) -> str:
    """The attention core a training on this device and sequence length runs, for its record."""
    kernel = cpu_kernel(device_type, seq_len)
    if kernel == "fused":
        return ("fused CPU kernel (trainers/csrc/causal_attention.cpp, built for this CPU), "
                "fp32 scores and probabilities")
    if kernel == "blocked":
        why = fused_attention.unavailable_reason()
        return ("blocked CPU kernel (trainers/nn/attention.py), fp32 scores and probabilities"
                + (f"; fused kernel unavailable: {why}" if why else ""))
    return "torch SDPA (fused kernel the backend picks), v zero-padded to the q/k head dim"


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     scale: float) -> torch.Tensor:
    """softmax(q·kᵀ·scale + causal mask)·v over (B, H, T, D) inputs; returns (B, H, T, Dv)."""
    b, h, t, _ = q.shape
    kernel = cpu_kernel(q.device.type, t)
    if kernel == "fused":
        fused: torch.Tensor = FusedCausalAttention.apply(q, k, v, scale)
        return fused
    if kernel == "blocked":
        heads = [x.reshape(b * h, t, x.shape[-1]) for x in (q, k, v)]  # a copy unless head-major
        blocked: torch.Tensor = BlockedCausalAttention.apply(*heads, scale)
        return blocked.view(b, h, t, -1)
    return _padded_sdpa(q, k, v, scale)


def _padded_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 scale: float) -> torch.Tensor:
    dv, d = v.shape[-1], max(q.shape[-1], v.shape[-1])
    q, k, v = (F.pad(x, (0, d - x.shape[-1])) if x.shape[-1] < d else x for x in (q, k, v))
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)[..., :dv]


@functools.lru_cache(maxsize=8)
def _causal_bias(t: int, device: torch.device) -> torch.Tensor:
    """(T, T) additive mask: 0 on and below the diagonal, -inf above."""
    return torch.full((t, t), float("-inf"), device=device).triu(1)


def _head_blocks(n: int, t: int) -> list[slice]:
    """Slices of the n heads, sized so one block's (heads, 128, t) scores fit in cache."""
    heads = max(1, _BLOCK_ELEMENTS // (min(t, _ROWS) * t))
    return [slice(i, i + heads) for i in range(0, n, heads)]


def _row_blocks(t: int) -> list[tuple[int, int]]:
    """Query rows in blocks of _ROWS: a block's rows attend only to keys before its end, so
    earlier blocks skip the masked upper triangle's GEMM work."""
    return [(r0, min(r0 + _ROWS, t)) for r0 in range(0, t, _ROWS)]


class BlockedCausalAttention(torch.autograd.Function):
    """Exact causal attention on (N, T, D) heads, computed in fp32 whatever the input dtype.

    bf16 inputs (autocast) are upcast per block: on CPU the bf16 flash kernel is 2.6-2.9x
    slower than this fp32 path (128 tokens), and fp32 scores and probabilities are what fused
    GPU kernels keep in registers too (they round only P to bf16 before the second GEMM).
    Output is in q's dtype."""

    @staticmethod
    def forward(ctx, q, k, v, scale):
        n, t, _ = q.shape
        bias = _causal_bias(t, q.device)
        out = torch.empty(n, t, v.shape[-1], dtype=torch.float32, device=q.device)
        with torch.autocast(q.device.type, enabled=False):
            for hs in _head_blocks(n, t):
                for r0, r1 in _row_blocks(t):
                    p = _probabilities(q[hs, r0:r1], k[hs, :r1], bias[r0:r1, :r1], scale)
                    torch.bmm(p, v[hs, :r1].float(), out=out[hs, r0:r1])
        ctx.save_for_backward(q, k, v)
        ctx.scale = scale
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v = ctx.saved_tensors
        scale = ctx.scale
        n, t, _ = q.shape
        bias = _causal_bias(t, q.device)
        grad_out = grad_out.float()
        dq = torch.empty(q.shape, dtype=torch.float32, device=q.device)
        # dk and dv accumulate transposed, (N, D, T), so no GEMM writes through a transposed view
        dk_t = torch.empty(n, k.shape[-1], t, dtype=torch.float32, device=q.device)
        dv_t = torch.empty(n, v.shape[-1], t, dtype=torch.float32, device=q.device)
        with torch.autocast(q.device.type, enabled=False):
            for hs in _head_blocks(n, t):
                # last row block first: it reaches every key, so it sets dk and dv (no zero fill)
                for i, (r0, r1) in enumerate(reversed(_row_blocks(t))):
                    qb, kb, vb = q[hs, r0:r1].float(), k[hs, :r1].float(), v[hs, :r1].float()
                    go = grad_out[hs, r0:r1]
                    p = _probabilities(qb, kb, bias[r0:r1, :r1], scale)  # recomputed, not saved
                    dp = torch.bmm(go, vb.transpose(1, 2))
                    ds = torch._softmax_backward_data(dp, p, -1, p.dtype)  # p * (dp - Σ p·dp)
                    torch.bmm(ds, kb, out=dq[hs, r0:r1]).mul_(scale)
                    if i == 0:
                        torch.bmm(go.transpose(1, 2), p, out=dv_t[hs])
                        torch.bmm(qb.transpose(1, 2), ds, out=dk_t[hs]).mul_(scale)
                    else:
                        dv_t[hs, :, :r1].baddbmm_(go.transpose(1, 2), p)
                        dk_t[hs, :, :r1].baddbmm_(qb.transpose(1, 2), ds, alpha=scale)
        dk, dv = dk_t.transpose(1, 2), dv_t.transpose(1, 2)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None


def _probabilities(q, k, bias, scale):
    """softmax(q·kᵀ·scale + bias) in fp32 for one block."""
    scores = torch.baddbmm(bias, q.float(), k.float().transpose(1, 2), alpha=scale)
    return torch.softmax(scores, dim=-1)
