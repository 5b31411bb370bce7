from __future__ import annotations

import pytest
import torch

from trainers.fp8 import E4M3_MAX, fp8_linear, quantize_tiles


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
