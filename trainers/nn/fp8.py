"""FP8 linear layers as DeepSeek-V3 trains them: E4M3 for all three GEMMs of a Linear.

Scaling follows the technical report (§3.3): activations in 1×128 tiles (one scale per token per
128 channels), weights in 128×128 blocks, each scale = amax / 448 so the block fills E4M3's range.
The weight-gradient GEMM reduces over tokens, so there its operands are tiled along tokens
(128×1), which keeps activation-gradient scaling fine-grained (block-wise 128×128 scaling of
activation gradients diverged a 16B MoE: DeepSeek-V3 technical report, arXiv:2412.19437,
Appendix B.2).

Every GEMM here is written C(M,N) = A(M,K) · B(N,K)ᵀ with the reduction dim K last in both
operands, so a scaling block is (rows × 128 along K): 1×128 or 128×128.
    fprop  y  = x  · Wᵀ     A = x    (1×128)   B = W    (128×128)
    dgrad  dx = dy · W      A = dy   (1×128)   B = Wᵀ   (128×128, W's blocks transposed)
    wgrad  dW = dyᵀ · x     A = dyᵀ  (1×128)   B = xᵀ   (1×128)    i.e. 128×1 along tokens
These are exactly the three pairings `torch._scaled_mm` accepts for block-wise scales on Hopper.

Two back ends share one quantizer (`_quantize`), so their codes and scales are identical:
- "emulated" (any device): dequantize the E4M3 codes and multiply in fp32. The numerics of the
  quantization are exact; the speed is not fp8's. `TrainResult.fp8_emulated` is True.
- "native" (CUDA, Hopper): `torch._scaled_mm` on the codes with the block scales (fp32
  accumulation in the tensor cores' own order). Chosen only after `native_fp8_available` has run
  all three pairings on the device and matched the emulation; otherwise training emulates and
  records why.

Legend: M rows (tokens), K reduction dim, N output dim.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

import torch
import torch.nn.functional as F

from trainers.nn.fusion import active, fused

E4M3_MAX = 448.0  # largest finite float8_e4m3fn value
TILE = 128
Backend = Literal["emulated", "native"]


def _pad_to(x: torch.Tensor, dim: int, multiple: int) -> torch.Tensor:
    pad = (-x.shape[dim]) % multiple
    if pad == 0:
        return x
    widths = [0, 0] * x.dim()
    widths[2 * (x.dim() - 1 - dim) + 1] = pad
    return F.pad(x, widths)


def _quantize(x_RC: torch.Tensor, tile_rows: int, tile_cols: int = TILE,
              row_multiple: int = 1, col_multiple: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """E4M3 codes of `x` padded with zeros to whole tiles, and one fp32 scale per tile.

    Returns codes (R', C') and scales (R'/tile_rows, C'/tile_cols); scale = amax/448, so
    code · scale reproduces x up to E4M3 rounding. Zero padding changes no product.
    """
    x = _pad_to(_pad_to(x_RC.float(), 0, tile_rows * row_multiple), 1,
                tile_cols * col_multiple).contiguous()
    rp, cp = x.shape
    tiles = x.view(rp // tile_rows, tile_rows, cp // tile_cols, tile_cols)
    scale = (tiles.abs().amax(dim=(1, 3), keepdim=True) / E4M3_MAX).clamp(min=1e-12)
    codes = (tiles / scale).to(torch.float8_e4m3fn)
    return codes.view(rp, cp), scale.view(rp // tile_rows, cp // tile_cols)


# The fused paths' quantizer: the same function compiled into one kernel (amax per tile, scale,
# cast): 0.39 -> 0.09 ms for a 32768x1024 1x128 quantization on an H200 (benchmarks/RESULTS.md).
_quantize_fused = fused(_quantize)


def _dequantize(codes: torch.Tensor, scale: torch.Tensor, tile_rows: int,
                tile_cols: int = TILE) -> torch.Tensor:
    rp, cp = codes.shape
    tiles = codes.float().view(rp // tile_rows, tile_rows, cp // tile_cols, tile_cols)
    return (tiles * scale.view(rp // tile_rows, 1, cp // tile_cols, 1)).view(rp, cp)


def quantize_tiles(x_MK: torch.Tensor, tile_m: int, tile_k: int) -> torch.Tensor:
    """Round `x` through E4M3, one scale per (tile_m × tile_k) tile; returns dequantized fp32.

    1×128 activation tiles are ``tile_m=1, tile_k=128``; 128×128 weight blocks ``128, 128``.
    A dim shorter than one tile is one partial tile, quantized as it stands: zero padding would
    change neither its amax nor its codes, only multiply the work (a K of 16 padded to 128 is
    8x the elements), which is most of what the emulation costs at proxy widths.
    """
    m, k = x_MK.shape
    tile_m, tile_k = min(tile_m, m), min(tile_k, k)
    codes, scale = _quantize(x_MK, tile_m, tile_k)
    return _dequantize(codes, scale, tile_m, tile_k)[:m, :k]


# --- the two GEMM back ends: C(M,N) = A(M,K) · B(N,K)ᵀ, block rows 1 or 128 per operand --------

def _emulated_gemm(a_MK: torch.Tensor, b_NK: torch.Tensor, a_rows: int, b_rows: int,
                   out_dtype: torch.dtype) -> torch.Tensor:
    a = quantize_tiles(a_MK, a_rows, TILE)
    b = quantize_tiles(b_NK, b_rows, TILE)
    return (a @ b.t()).to(out_dtype)


# Relative error allowed between native and emulated products of the same codes and scales.
# Hopper's fp8 MMA accumulates with ~14 bits (DeepSeek-V3 §3.3.2), so even fp32 output differs
# from the emulation's exact fp32 sum (1.2e-4 seen on an H200); bf16 output adds its rounding.
# A misread scale layout gives errors of 0.07 and more.
NATIVE_TOLERANCE = {"fp32": 1e-3, "bf16": 8e-3}

# Whether this torch build gives fp32 GEMM output for block scales; settled by the probe.
_NATIVE_LAYOUT = {"out_fp32": True}


def _scale_a(scale: torch.Tensor) -> torch.Tensor:
    # 1×128 scales of A: shape (M, K/128), "outer-dim-major", i.e. strides (1, M)
    return scale.t().contiguous().t()


def _scale_b(scale: torch.Tensor, rows: int) -> torch.Tensor:
    """B goes in transposed (K, N); torch checks `scale_b.t()` against B (N, K)."""
    if rows == 1:  # 1×128: scale_b (K/128, N) with strides (N, 1)
        return scale.t().contiguous()
    return scale.t()  # 128×128: scale_b.t() is (N/128, K/128) row-major


def _native_gemm(a_MK: torch.Tensor, b_NK: torch.Tensor, a_rows: int, b_rows: int,
                 out_dtype: torch.dtype, layout: dict | None = None) -> torch.Tensor:
    layout = layout or _NATIVE_LAYOUT
    m, n = a_MK.shape[0], b_NK.shape[0]
    # torch._scaled_mm wants K and both dims of B divisible by 16. With 128×128 blocks on B,
    # cuBLAS reads B's scale rows at 16-byte strides while torch (2.11) insists on packed rows:
    # on an H200 a K/128 of 3 gave wrong products (rel. error 0.08), so K is padded with zeros
    # to a multiple of 4·128 there and both layouts agree.
    k_blocks = 4 if b_rows == TILE else 1
    quantize = _quantize_fused if active(a_MK) else _quantize
    qa, sa = quantize(a_MK, a_rows, row_multiple=16 // a_rows if a_rows < 16 else 1,
                      col_multiple=k_blocks)
    qb, sb = quantize(b_NK, b_rows, row_multiple=16 // b_rows if b_rows < 16 else 1,
                      col_multiple=k_blocks)
    gemm_dtype = torch.float32 if layout["out_fp32"] else torch.bfloat16
    y = torch._scaled_mm(qa, qb.t(), scale_a=_scale_a(sa) if a_rows == 1 else sa,
                         scale_b=_scale_b(sb, b_rows),
                         out_dtype=gemm_dtype)
    return y[:m, :n].to(out_dtype)


_GEMMS = {"emulated": _emulated_gemm, "native": _native_gemm}


class _Fp8LinearFn(torch.autograd.Function):
    """y = x Wᵀ with E4M3 operands in fprop, dgrad (input grad) and wgrad (weight grad)."""

    @staticmethod
    def forward(ctx: Any, x_MK: torch.Tensor, w_NK: torch.Tensor,
                backend: Backend) -> torch.Tensor:
        ctx.save_for_backward(x_MK, w_NK)
        ctx.out_dtype, ctx.backend = x_MK.dtype, backend
        with torch.autocast(x_MK.device.type, enabled=False):  # scaling decides precision
            return _GEMMS[backend](x_MK, w_NK, 1, TILE, x_MK.dtype)

    @staticmethod
    def backward(ctx: Any, dy_MN: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        x_MK, w_NK = ctx.saved_tensors
        gemm = _GEMMS[ctx.backend]
        dx = gemm(dy_MN, w_NK.t(), 1, TILE, ctx.out_dtype)  # reduces over N
        dw = gemm(dy_MN.t(), x_MK.t(), 1, 1, w_NK.dtype)  # reduces over M (tokens)
        return dx, dw, None


def fp8_linear(x: torch.Tensor, weight: torch.Tensor,
               backend: Backend = "emulated") -> torch.Tensor:
    """E4M3 linear for inputs of shape (..., K) and weight (N, K)."""
    lead = x.shape[:-1]
    y: torch.Tensor = _Fp8LinearFn.apply(x.reshape(-1, x.shape[-1]), weight, backend)
    return y.view(*lead, weight.shape[0])


# --- choosing the back end ----------------------------------------------------------------------

def _probe_cases(device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor, int, int]]:
    # awkward shapes on purpose: K/128 = 3 (not a multiple of 4), M and N not multiples of 128
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(200, 296, generator=g).to(device)
    w = (torch.randn(592, 296, generator=g) * 0.05).to(device)
    dy = torch.randn(200, 592, generator=g).to(device)
    return [(x, w, 1, TILE), (dy, w.t(), 1, TILE), (dy.t(), x.t(), 1, 1)]  # fprop, dgrad, wgrad


@functools.cache
def _probe(device_str: str) -> tuple[bool, str]:
    device = torch.device(device_str)
    cases = _probe_cases(device)
    first_error = ""
    for out_fp32 in (True, False):
        layout = {"out_fp32": out_fp32}
        try:
            worst = 0.0
            for a, b, ar, br in cases:
                ref = _emulated_gemm(a, b, ar, br, torch.float32)
                got = _native_gemm(a, b, ar, br, torch.float32, layout)
                worst = max(worst, float((got - ref).norm() / ref.norm()))
        except (RuntimeError, NotImplementedError, ValueError) as e:
            first_error = first_error or f"{type(e).__name__}: {str(e).splitlines()[0]}"
            continue
        tol = NATIVE_TOLERANCE["fp32" if out_fp32 else "bf16"]
        if worst > tol:
            first_error = first_error or f"native result differs from emulation by {worst:.2g}"
            continue
        _NATIVE_LAYOUT.update(layout)
        return True, (f"torch._scaled_mm block-wise (1x128 activations, 128x128 "
                      f"weights), {'fp32' if out_fp32 else 'bf16'} output; matched the "
                      f"emulation to {worst:.1e} at start-up"
                      + (f" (fp32 output rejected: {first_error})" if first_error else ""))
    return False, f"torch._scaled_mm block-wise probe failed ({first_error})"


def native_fp8_available(device: torch.device | str) -> tuple[bool, str]:
    """Whether `torch._scaled_mm` with DeepSeek-V3's block scaling runs correctly here, and a note.

    The answer comes from running the three GEMM pairings on the device once per process and
    comparing them with the emulation, not from version numbers.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return False, f"device {device.type} has no fp8 tensor cores"
    if not hasattr(torch, "_scaled_mm"):
        return False, "torch._scaled_mm is missing in this torch build"
    if torch.cuda.get_device_capability(device)[0] != 9:
        return False, "block-wise torch._scaled_mm runs on Hopper (sm_90) only"
    return _probe(str(device))


def fp8_backend(device: torch.device | str) -> tuple[Backend, str]:
    """The back end fp8 training uses on `device`, and the note recorded with the result."""
    ok, note = native_fp8_available(device)
    backend: Backend = "native" if ok else "emulated"
    return backend, f"{backend}: {note}"


class Fp8Linear(torch.nn.Linear):
    """A bias-free Linear whose three GEMMs run in E4M3 when `fp8` names a back end."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__(in_features, out_features, bias=False)
        self.fp8: Backend | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fp8:
            return fp8_linear(x, self.weight, self.fp8)
        return F.linear(x, self.weight)
