"""The output head and its cross-entropy in one pass, a slice of tokens at a time.

At a subword vocabulary the proxy's logits outweigh everything else it holds: (tokens × V) floats
per head, 268 MB in fp32 for a batch of 16 × 128 tokens at V = 32,768 (and the MTP head has its
own), against ~60 MB for the whole rest of a debug proxy's step. Materialized, they make the
proxy's memory and most of its time the vocabulary's, not the recipe's: a `max_peak_memory_gb`
set for the blocks rules out all but the smallest batches, and the step spends its time
writing and faulting in those pages. Full runs shard them (Megatron-LM's vocabulary-parallel
cross-entropy: 1/TP of the vocabulary per rank) or never hold them whole (fused linear
cross-entropy: Liger Kernel, arXiv:2410.10989; Cut Cross-Entropy, arXiv:2411.09009).

`linear_cross_entropy` computes the logits of a slice of tokens at a time (`CHUNK_ELEMENTS`),
their loss, and at once their gradients with respect to the hidden states and the head's weight
(the softmax minus the one-hot target, times the other operand), keeping only those two
gradients for backward: (tokens × dim) + (V × dim) floats instead of (tokens × V). The same
loss and gradients as `F.cross_entropy(h @ W.T)` up to float summation order; one pass over the
head's weight per slice, no recomputation.

Byte vocabularies (< `FUSED_MIN_VOCAB`) keep the plain path, whose logits are a few MB: their
measured memory figures (the shipped specs' `max_peak_memory_gb`) stay as they were calibrated.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

FUSED_MIN_VOCAB = 4096
# logits per slice. On a CPU 2M floats (8 MB in fp32): of 1M-8M, 1M-2M were fastest at V = 8k and
# 32k (one thread; 4M 1.1-1.2x slower, 8M 1.4-1.8x). A GPU wants few, large slices (each is a
# handful of kernel launches): 64M floats, 256 MB.
CHUNK_ELEMENTS = {"cpu": 1 << 21}
GPU_CHUNK_ELEMENTS = 1 << 26


def linear_cross_entropy(h_ND: torch.Tensor, weight_VD: torch.Tensor, targets_N: torch.Tensor,
                         scale: float = 1.0) -> torch.Tensor:
    """Mean cross-entropy of ``scale · h @ weight.T`` against ``targets``, without the logits."""
    budget = CHUNK_ELEMENTS.get(h_ND.device.type, GPU_CHUNK_ELEMENTS)
    rows = max(1, budget // weight_VD.shape[0])
    if torch.is_grad_enabled() and (h_ND.requires_grad or weight_VD.requires_grad):
        loss: torch.Tensor = _LinearCrossEntropy.apply(h_ND, weight_VD, targets_N, scale, rows)
        return loss
    total = h_ND.new_zeros((), dtype=torch.float32)
    for s in range(0, h_ND.shape[0], rows):
        logits = (h_ND[s:s + rows] @ weight_VD.T).float() * scale
        total += F.cross_entropy(logits, targets_N[s:s + rows], reduction="sum")
    return total / h_ND.shape[0]


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, h_ND: torch.Tensor, weight_VD: torch.Tensor,
                targets_N: torch.Tensor, scale: float, rows: int) -> torch.Tensor:
        n = h_ND.shape[0]
        grad_h = torch.empty(h_ND.shape, dtype=torch.float32, device=h_ND.device)
        grad_w = torch.zeros(weight_VD.shape, dtype=torch.float32, device=h_ND.device)
        total = h_ND.new_zeros((), dtype=torch.float32)
        for s in range(0, n, rows):
            h, t = h_ND[s:s + rows], targets_N[s:s + rows]
            logits = (h @ weight_VD.T).float() * scale
            lse = torch.logsumexp(logits, dim=-1)
            total += (lse - logits.gather(1, t[:, None])[:, 0]).sum()
            # d(sum of CE)/d(logits) = softmax - one_hot, built in the logits' own storage
            grad = logits.sub_(lse[:, None]).exp_()
            grad[torch.arange(len(t), device=t.device), t] -= 1.0
            grad.mul_(scale / n)
            grad_h[s:s + rows] = grad @ weight_VD.float()
            grad_w += grad.T @ h.float()
        ctx.save_for_backward(grad_h, grad_w)
        ctx.dtypes = (h_ND.dtype, weight_VD.dtype)
        return total / n

    @staticmethod
    def backward(ctx: Any, grad_loss: torch.Tensor
                 ) -> tuple[torch.Tensor | None, ...]:
        grad_h, grad_w = ctx.saved_tensors
        h_dtype, w_dtype = ctx.dtypes
        return ((grad_h * grad_loss).to(h_dtype), (grad_w * grad_loss).to(w_dtype),
                None, None, None)
