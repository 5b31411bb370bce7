"""The GPU's fused paths (``MOETUNE_FUSION=compile``): RMSNorm, rope, SwiGLU, the fp8 quantizer
and the MoE dispatch compiled or rewritten so that each is one pass over the activations.

A profile of a `proxy-l` step on an H200 (benchmarks/RESULTS.md, "A GPU step: where its time
goes") found most of the GPU's time in memory-bound element-wise work, casts, copies and atomic
scatter-adds, each op a separate pass. `torch.compile` of these small pure functions fuses each
into one generated kernel forward and one backward (the math is the eager code's, so results
agree to rounding), and `trainers.nn.moe` dispatches by permutation gathers instead.

Measured there (benchmarks/RESULTS.md, "A GPU step: where its time goes"): faster than the
eager code once compiled, but the compile with cold caches costs more than a 48-step proxy-l
trial saves; so the default is
``eager`` (the CPU's code on every device) and ``compile`` is for long runs. ``blocks``
compiles every transformer block whole on top (not yet measured). ``MOETUNE_FUSION`` is read
once per process. A compile failure (no Triton, an inductor error) turns the fused paths off for
the rest of the process, with the reason kept for the run's record (`note()`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

MODES = ("compile", "eager", "blocks")
_failure: list[str] = []


@functools.cache
def mode() -> str:
    value = os.environ.get("MOETUNE_FUSION", "eager")
    if value not in MODES:
        raise ValueError(f"MOETUNE_FUSION must be one of {MODES}, but got {value!r}.")
    return value


def active(x: torch.Tensor) -> bool:
    """Whether the fused paths run for a tensor: CUDA, ``compile`` mode and no compile failure."""
    return x.is_cuda and mode() in ("compile", "blocks") and not _failure


def note() -> str:
    """How the GPU's element-wise paths ran, for a run's environment record."""
    if _failure:
        return f"eager (compile failed: {_failure[0]})"
    return mode()


def fused(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, compiled at its first call in ``compile`` mode; eager after a compile failure."""
    compiled: list[Callable[..., Any]] = []

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        if mode() != "compile" or _failure:  # blocks: traced as plain code by the block's compile
            return fn(*args, **kwargs)
        if not compiled:
            compiled.append(torch.compile(fn, dynamic=None))
        try:
            return compiled[0](*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - inductor raises many kinds; eager still works
            _failure.append(f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
            return fn(*args, **kwargs)

    run.eager = fn  # type: ignore[attr-defined]
    return run


@fused
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The model's RMSNorm (fp32 statistics whatever x's dtype), output in x's dtype."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (weight * y).to(x.dtype)


@fused
def rope(x: torch.Tensor, cos_sin: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved pairs of x (B, T, H, R) by angles given as (T, R/2, 2) (cos, sin):
    the complex multiply of `trainers.nn.model.apply_rope` written in real arithmetic, which the
    compiler fuses (it does not generate code for complex numbers)."""
    pairs = x.float().unflatten(-1, (-1, 2))
    x0, x1 = pairs[..., 0], pairs[..., 1]
    c, s = cos_sin[None, :, None, :, 0], cos_sin[None, :, None, :, 1]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2).to(x.dtype)


@fused
def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * up
