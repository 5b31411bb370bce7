"""The fused CPU attention kernel (csrc/causal_attention.cpp): built at first use, then cached.

The kernel is compiled for the host's own instruction set (`-march=native`), so the library is
cached per source, compiler and CPU (`cache_dir()`: `~/.cache/moetune/kernels` by default),
written under a temporary name and renamed into place, which lets concurrent trial processes
build it at the same time safely. Without a C++ compiler, or with `MOETUNE_FUSED_ATTENTION=0`,
`library()` returns None and attention falls back to the PyTorch blocked kernel; the reason is
kept for the run's record (`unavailable_reason()`).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch

SOURCE = Path(__file__).parents[1] / "csrc" / "causal_attention.cpp"
FLAGS = ("-O3", "-march=native", "-std=c++17", "-shared", "-fPIC", "-pthread")
# parallel over torch's own (already loaded) OpenMP threads, see the source; a compiler without
# OpenMP (Apple clang) builds the std::thread version instead
OPENMP = "-fopenmp"
_unavailable: list[str] = []  # why library() returned None, once it has


def cache_dir() -> Path:
    """$MOETUNE_CACHE_DIR/kernels if set; else ~/.cache/moetune/kernels, or, where that cannot
    be created (a read-only home, as in some cluster containers), a per-user temp directory."""
    root = os.environ.get("MOETUNE_CACHE_DIR")
    if root:
        return Path(root) / "kernels"
    xdg = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    default = Path(xdg) / "moetune" / "kernels"
    try:
        default.mkdir(parents=True, exist_ok=True)
        return default
    except OSError:
        user = os.getuid() if hasattr(os, "getuid") else os.getlogin()
        return Path(tempfile.gettempdir()) / f"moetune-kernels-{user}"


def _cpu_identity() -> str:
    """What -march=native depends on: the CPU's model and feature flags."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return "\n".join(sorted({ln for ln in lines if ln.startswith(("model name", "flags"))}))
    except OSError:
        return platform.processor() or platform.machine()


def _build(compiler: str, flags: tuple[str, ...] = (*FLAGS, OPENMP)) -> Path:
    """The library built from SOURCE with these flags: from the cache, else compiled into it."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True,
                             check=True).stdout
    key = hashlib.sha256("\0".join([SOURCE.read_text(), compiler, version, " ".join(flags),
                                    _cpu_identity()]).encode()).hexdigest()[:16]
    target = cache_dir() / f"causal_attention-{key}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        result = subprocess.run([compiler, *flags, str(SOURCE), "-o", tmp], capture_output=True,
                                text=True)
        if result.returncode != 0:
            raise RuntimeError(f"{compiler} failed: {result.stderr.strip()[-2000:]}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


# each tensor argument is a (data pointer, strides pointer) pair
_TENSOR: list[type[ctypes._SimpleCData[Any]] | type[ctypes._Pointer[Any]]] = [
    ctypes.c_void_p, ctypes.POINTER(ctypes.c_long)]
_INTS: list[type[ctypes._SimpleCData[Any]] | type[ctypes._Pointer[Any]]] = [ctypes.c_int] * 5


def load(path: Path) -> ctypes.CDLL:
    """The built library at path, its two entry points typed."""
    lib = ctypes.CDLL(str(path))
    lib.moetune_attention_forward.argtypes = (
        _TENSOR * 4 + _INTS + [ctypes.c_float, ctypes.c_int])
    lib.moetune_attention_backward.argtypes = (
        _TENSOR * 7 + _INTS + [ctypes.c_float, ctypes.c_int])
    return lib


@functools.lru_cache(maxsize=1)
def library() -> ctypes.CDLL | None:
    """The compiled kernel, or None (reason in `unavailable_reason()`) when it cannot be had."""
    if os.environ.get("MOETUNE_FUSED_ATTENTION", "1") == "0":
        _unavailable.append("disabled by MOETUNE_FUSED_ATTENTION=0")
        return None
    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not compiler:
        _unavailable.append("no C++ compiler (g++/c++ or $CXX) on PATH")
    else:
        try:
            try:
                path = _build(compiler)
            except RuntimeError:
                path = _build(compiler, FLAGS)  # no OpenMP; if this fails too, say why
            return load(path)
        except (OSError, RuntimeError, subprocess.SubprocessError) as e:
            _unavailable.append(f"build failed: {e}")
    warnings.warn(f"fused CPU attention unavailable ({_unavailable[-1]}); using the PyTorch "
                  "blocked kernel, which is slower", RuntimeWarning, stacklevel=2)
    return None


def unavailable_reason() -> str | None:
    """Why `library()` returned None; None if it has not or did not."""
    return _unavailable[-1] if _unavailable else None


def _fp32_rows(x: torch.Tensor) -> torch.Tensor:
    """x as fp32 with a contiguous last dim (what the kernel reads); a copy only if needed."""
    x = x.float()
    return x if x.stride(-1) == 1 else x.contiguous()


def _compact(x: torch.Tensor) -> torch.Tensor:
    """x itself if it spans its whole storage, else a copy of just its elements."""
    if x.untyped_storage().nbytes() > x.numel() * x.element_size():
        return x.contiguous()
    return x


def _args(x: torch.Tensor) -> list:
    return [ctypes.c_void_p(x.data_ptr()), (ctypes.c_long * 3)(*x.stride()[:3])]


class FusedCausalAttention(torch.autograd.Function):
    """Exact causal attention on (B, H, T, D) tensors (any strides) with the compiled kernel.

    Computes in fp32 whatever the input dtype (as the blocked kernel does) and returns q's
    dtype. Saves only q, k, v for backward, which recomputes the probabilities. The output is
    laid out token-major, (B, T, H, Dv) in memory, so the MLA output projection's reshape to
    (B, T, H·Dv) is free."""

    @staticmethod
    def forward(ctx, q, k, v, scale):
        lib = library()
        assert lib is not None, "FusedCausalAttention used without the compiled kernel"
        b, h, t, dqk = q.shape
        dv = v.shape[-1]
        q32, k32, v32 = (_fp32_rows(x) for x in (q, k, v))
        out = torch.empty(b, t, h, dv, dtype=torch.float32).transpose(1, 2)
        lib.moetune_attention_forward(*_args(q32), *_args(k32), *_args(v32), *_args(out),
                                      b, h, t, dqk, dv, scale, torch.get_num_threads())
        # a view into a wider tensor (MLA's v is split off its k) would keep all of it alive
        ctx.save_for_backward(*(_compact(x) for x in (q, k, v)))
        ctx.scale = scale
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v = ctx.saved_tensors
        b, h, t, dqk = q.shape
        dv = v.shape[-1]
        q32, k32, v32, g32 = (_fp32_rows(x) for x in (q, k, v, grad_out))
        dq, dk, dvv = (torch.empty_like(x) for x in (q32, k32, v32))
        lib = library()
        assert lib is not None, "FusedCausalAttention used without the compiled kernel"
        lib.moetune_attention_backward(
            *_args(q32), *_args(k32), *_args(v32), *_args(g32), *_args(dq), *_args(dk),
            *_args(dvv), b, h, t, dqk, dv, ctx.scale, torch.get_num_threads())
        return dq.to(q.dtype), dk.to(k.dtype), dvv.to(v.dtype), None
