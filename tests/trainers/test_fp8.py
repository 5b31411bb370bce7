from __future__ import annotations

import pytest
import torch

from trainers.nn import fp8
from trainers.nn.fp8 import E4M3_MAX, fp8_linear, quantize_tiles


@pytest.mark.parametrize(("tile_m", "tile_k"), [(1, 128), (128, 128), (128, 1)])
def test_quantization_error_within_e4m3_bounds(tile_m, tile_k):
    x = torch.randn(256, 384) * torch.logspace(-3, 2, 384)  # wide dynamic range across channels
    q = quantize_tiles(x, tile_m, tile_k)
    tiles = x.view(256 // tile_m, tile_m, 384 // tile_k, tile_k)
    scale = (tiles.abs().amax(dim=(1, 3), keepdim=True) / E4M3_MAX).expand_as(tiles)
    scale = scale.reshape(256, 384)
    # E4M3: 3 mantissa bits -> relative rounding error <= 2^-4 for normals; below the smallest
    # normal (2^-6 · scale) the spacing is 2^-9 · scale, so absolute error <= 2^-10 · scale.
    bound = torch.maximum(x.abs() * 2 ** -4, scale * 2 ** -10)
    assert ((q - x).abs() <= bound * (1 + 1e-6)).all()
    assert not torch.equal(q, x)  # it really quantizes


def test_tile_scaling_isolates_outliers():
    """1×128 tiles: an outlier in one tile does not flush the other tiles to zero."""
    x = torch.full((1, 256), 1e-3)
    x[0, 0] = 1e4
    q = quantize_tiles(x, 1, 128)
    assert q[0, 128:].allclose(x[0, 128:], rtol=2 ** -4)


def test_fp8_linear_close_to_fp32_with_gradients():
    x = torch.randn(64, 256, requires_grad=True)
    w = (torch.randn(128, 256) * 0.05).requires_grad_()
    y = fp8_linear(x, w)
    y_ref = x @ w.t()
    rel = (y - y_ref).norm() / y_ref.norm()
    assert 1e-4 < rel < 0.05
    g = torch.randn_like(y)
    dx, dw = torch.autograd.grad(y, (x, w), g)
    dx_ref, dw_ref = g @ w, g.t() @ x
    assert (dx - dx_ref).norm() / dx_ref.norm() < 0.05
    assert (dw - dw_ref).norm() / dw_ref.norm() < 0.05


# --- the native back end's plumbing, checked on CPU against torch's documented rules ------------

def _scaling_kind(t: torch.Tensor, scale: torch.Tensor) -> str:
    """Which block scaling `torch._scaled_mm` sees for operand `t` (R, C), per ScaledBlas.cpp."""
    r, c = t.shape
    cb = -(-c // 128)

    def dim_ok(d, size, stride):
        return scale.shape[d] == size and (size <= 1 or scale.stride(d) == stride)

    if scale.dim() == 2 and dim_ok(0, r, 1) and dim_ok(1, cb, r):
        return "1x128"
    if scale.dim() == 2 and dim_ok(0, -(-r // 128), cb) and dim_ok(1, cb, 1):
        # cuBLAS reads these rows at 16-byte strides (seen on an H200, torch 2.11): a packed row
        # of 3 scales gave wrong products, so only whole groups of 4 are correct
        return "128x128" if scale.shape[0] == 1 or cb % 4 == 0 else "misread"
    return "invalid"


def _expand(t: torch.Tensor, scale: torch.Tensor, kind: str) -> torch.Tensor:
    rows = 1 if kind == "1x128" else 128
    s = scale.repeat_interleave(rows, 0)[: t.shape[0]].repeat_interleave(128, 1)[:, : t.shape[1]]
    return t.float() * s


def _fake_scaled_mm(a, b, *, scale_a, scale_b, out_dtype):
    """torch._scaled_mm's contract for block-wise scales (mat_b column-major, scale_b checked
    transposed against mat_b.t()), computed in fp32 on CPU."""
    assert a.dtype == b.dtype == torch.float8_e4m3fn
    assert a.is_contiguous() and b.t().is_contiguous(), "a row-major, b column-major"
    assert a.shape[1] % 16 == 0 and b.shape[0] % 16 == 0 and b.shape[1] % 16 == 0
    kinds = (_scaling_kind(a, scale_a), _scaling_kind(b.t(), scale_b.t()))
    assert kinds in {("1x128", "128x128"), ("128x128", "1x128"), ("1x128", "1x128")}, kinds
    return (_expand(a, scale_a, kinds[0]) @ _expand(b.t(), scale_b.t(), kinds[1]).t()).to(
        out_dtype)


def test_native_gemm_layouts_meet_scaled_mm_contract(monkeypatch):
    """Every pairing the native back end issues passes torch's scale-layout checks, and reading
    the scales as torch documents reproduces the emulation (same codes, same scales)."""
    monkeypatch.setattr(torch, "_scaled_mm", _fake_scaled_mm, raising=False)
    layout = {"out_fp32": True}
    for a, b, ar, br in fp8._probe_cases(torch.device("cpu")):
        ref = fp8._emulated_gemm(a, b, ar, br, torch.float32)
        got = fp8._native_gemm(a, b, ar, br, torch.float32, layout)
        assert got.shape == ref.shape == (a.shape[0], b.shape[0])
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-4)


def test_emulated_gemm_equals_dequantized_product():
    a, b = torch.randn(40, 300), torch.randn(70, 300)
    got = fp8._emulated_gemm(a, b, 1, 128, torch.float32)
    torch.testing.assert_close(got, quantize_tiles(a, 1, 128) @ quantize_tiles(b, 128, 128).t())


def test_cpu_trains_fp8_emulated_and_says_why():
    backend, note = fp8.fp8_backend("cpu")
    assert backend == "emulated" and "no fp8 tensor cores" in note


cuda_hopper = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9,
    reason="native fp8 needs a Hopper GPU (runs in the device session's bench script)")


@cuda_hopper
def test_native_fp8_matches_emulation_on_hopper():
    ok, note = fp8.native_fp8_available("cuda")
    assert ok, note
    x = torch.randn(300, 296, device="cuda", requires_grad=True)
    w = (torch.randn(592, 296, device="cuda") * 0.05).requires_grad_()
    g = torch.randn(300, 592, device="cuda")
    outs = {}
    for backend in ("native", "emulated"):
        y = fp8_linear(x, w, backend)
        outs[backend] = (y, *torch.autograd.grad(y, (x, w), g))
    # same codes and scales; only accumulation order and the GEMM's output rounding differ
    tol = fp8.NATIVE_TOLERANCE["fp32" if fp8._NATIVE_LAYOUT["out_fp32"] else "bf16"]
    for nat, emu in zip(outs["native"], outs["emulated"]):
        assert 0 < (nat - emu).norm() / emu.norm() < tol


@pytest.mark.parametrize("shape, tile_m", [((300, 40), 1), ((300, 200), 1), ((40, 24), 128),
                                           ((200, 300), 128)])
def test_partial_tiles_quantize_as_if_zero_padded(shape, tile_m):
    """A dim shorter than one tile is quantized unpadded; the values must equal those of the
    zero-padded tensor (the layout the native back end quantizes), element for element."""
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(3)) * 5
    r, c = shape
    padded = torch.zeros(-(-r // tile_m) * tile_m if tile_m > 1 else r, -(-c // 128) * 128)
    padded[:r, :c] = x
    got = quantize_tiles(x, tile_m, 128)
    want = fp8._dequantize(*fp8._quantize(padded, tile_m, 128), tile_m, 128)[:r, :c]
    assert torch.equal(got, want)
