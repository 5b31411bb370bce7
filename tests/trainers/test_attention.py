"""The attention cores: fused and blocked CPU kernels against a float64 reference, and dispatch."""

import shutil
import tempfile
import warnings

import pytest
import torch

from trainers.nn import attention, fused_attention
from trainers.nn.attention import causal_attention
from trainers.nn.fused_attention import FusedCausalAttention


def _reference(q, k, v, scale):
    """Plain causal softmax attention in float64 over (B, H, T, D) inputs."""
    q, k, v = (x.double() for x in (q, k, v))
    t = q.shape[2]
    scores = q @ k.transpose(-1, -2) * scale
    scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(-1) @ v


def _blocked(q, k, v, scale):
    b, h, t, _ = q.shape
    heads = [x.reshape(b * h, t, x.shape[-1]) for x in (q, k, v)]
    return attention.BlockedCausalAttention.apply(*heads, scale).view(b, h, t, -1)


KERNELS = {"fused": FusedCausalAttention.apply, "blocked": _blocked}


def _inputs(b, t, h, dqk, dv, dtype=torch.float32, seed=0):
    """Leaf q, k, v in the token-major (B, T, H, D) layout the model's projections produce."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, t, h, d, generator=g).to(dtype).requires_grad_()
            for d in (dqk, dqk, dv)]


def _nodes(out) -> set[str]:
    """Names of the autograd nodes in out's graph."""
    seen, todo = set(), [out.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        todo.extend(n for n, _ in node.next_functions)
    return {n.name() for n in seen}


def _grads(fn, q, k, v, grad_out):
    """fn's output and input gradients; fn sees head-major (B, H, T, D) views, as in MLA."""
    out = fn(*(x.transpose(1, 2) for x in (q, k, v)), 0.3).transpose(1, 2)
    return (out, *torch.autograd.grad(out, (q, k, v), grad_out.to(out.dtype)))


# T=1, 5, 17: fewer rows than one tile / vector, and one past a vector; 128: one row block of
# the blocked kernel; 200 and 300: several with a remainder (the causal skipping); 2 x 18 heads:
# several head blocks with a remainder, and an odd split of problems between threads.
@pytest.mark.parametrize("t", [1, 5, 17, 128, 200, 300])
@pytest.mark.parametrize("kernel", KERNELS)
def test_kernel_matches_float64_reference(kernel, t):
    q, k, v = _inputs(2, t, 18, 24, 16)
    grad_out = torch.randn(2, t, 18, 16, generator=torch.Generator().manual_seed(1))
    ours = _grads(KERNELS[kernel], q, k, v, grad_out)
    ref = _grads(_reference, q, k, v, grad_out)
    for name, a, b in zip(("out", "dq", "dk", "dv"), ours, ref):
        torch.testing.assert_close(a.double(), b.double(), rtol=1e-5, atol=1e-5,
                                   msg=lambda m, name=name: f"{name}: {m}")


# proxy-l's heads (96, 64) and DeepSeek-V3's (192, 128): several vector groups per row, and
# the longest sequence the fused kernel takes
@pytest.mark.parametrize("t, h, dqk, dv", [(37, 3, 96, 64), (21, 2, 192, 128),
                                           (attention.FUSED_MAX_SEQ, 1, 8, 8)])
@pytest.mark.parametrize("kernel", KERNELS)
def test_kernel_handles_wide_heads_and_long_rows(kernel, t, h, dqk, dv):
    q, k, v = _inputs(1, t, h, dqk, dv)
    grad_out = torch.randn(1, t, h, dv, generator=torch.Generator().manual_seed(3))
    ours = _grads(KERNELS[kernel], q, k, v, grad_out)
    ref = _grads(_reference, q, k, v, grad_out)
    for name, a, b in zip(("out", "dq", "dk", "dv"), ours, ref):
        torch.testing.assert_close(a.double(), b.double(), rtol=1e-5, atol=1e-5,
                                   msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("kernel", KERNELS)
def test_kernel_matches_padded_sdpa(kernel):
    q, k, v = _inputs(3, 96, 4, 12, 20)  # v wider than q/k: the padding goes the other way
    grad_out = torch.randn(3, 96, 4, 20)
    ours = _grads(KERNELS[kernel], q, k, v, grad_out)
    sdpa = _grads(attention._padded_sdpa, q, k, v, grad_out)
    for a, b in zip(ours, sdpa):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernel", KERNELS)
def test_bf16_inputs_keep_their_dtype_and_fp32_accuracy(kernel):
    q, k, v = _inputs(2, 64, 6, 24, 16, dtype=torch.bfloat16)
    grad_out = torch.randn(2, 64, 6, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # as in training: must not recast
        ours = _grads(KERNELS[kernel], q, k, v, grad_out)
    assert all(x.dtype == torch.bfloat16 for x in ours)
    ref = _grads(_reference, q, k, v, grad_out.bfloat16())
    for a, b in zip(ours, ref):
        # computed in fp32 from bf16 inputs: the error is the final rounding to bf16 (2^-8)
        torch.testing.assert_close(a.double(), b.double(), rtol=2 ** -7, atol=2 ** -7)


@pytest.mark.parametrize("kernel", KERNELS)
def test_only_q_k_v_are_saved_for_backward(kernel):
    """Flash-style memory: probabilities are recomputed in backward, not kept."""
    q, k, v = _inputs(2, 128, 4, 24, 16)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda x: saved.append(x) or x, lambda x: x):
        KERNELS[kernel](*(x.transpose(1, 2) for x in (q, k, v)), 0.3)
    assert sorted(x.shape[-1] for x in saved) == [16, 24, 24]
    assert all(x.numel() == 2 * 128 * 4 * x.shape[-1] for x in saved)


def test_fused_kernel_reads_model_layouts_and_writes_token_major():
    """v as a split view (rows with gaps), k head-major, an expanded (stride-0) grad: as in MLA."""
    g = torch.Generator().manual_seed(2)
    kv = torch.randn(2, 40, 3, 24 + 16, generator=g, requires_grad=True)
    q = torch.randn(2, 40, 3, 24, generator=g, requires_grad=True)
    k_nope, v = kv.split([24, 16], dim=-1)
    k = k_nope.transpose(1, 2).contiguous()  # head-major, as MLA assembles it
    grad_out = torch.ones(1, 1, 1, 1).expand(2, 3, 40, 16)
    ours, ref = (fn(q.transpose(1, 2), k, v.transpose(1, 2), 0.2)
                 for fn in (FusedCausalAttention.apply, _reference))
    assert ours.transpose(1, 2).is_contiguous()  # (B, T, H, Dv) in memory: wo's reshape is free
    grads = [torch.autograd.grad(o, (q, kv), grad_out.to(o.dtype)) for o in (ours, ref)]
    torch.testing.assert_close(ours.double(), ref, rtol=1e-5, atol=1e-5)
    for a, b in zip(*grads):
        torch.testing.assert_close(a.double(), b.double(), rtol=1e-5, atol=1e-5)


def test_fused_kernel_is_identical_at_any_thread_count():
    """Each (batch, head) problem runs whole on one thread: the split never changes a result."""
    q, k, v = _inputs(2, 70, 5, 24, 16)
    grad_out = torch.randn(2, 70, 5, 16)
    threads = torch.get_num_threads()
    results = []
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            results.append(_grads(FusedCausalAttention.apply, q, k, v, grad_out))
    finally:
        torch.set_num_threads(threads)
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert torch.equal(a, b)


def test_fused_kernel_propagates_nan():
    """A diverging run must still show NaN downstream, not have it softmaxed away."""
    q, k, v = (x.detach() for x in _inputs(1, 20, 2, 24, 16))
    q[0, 7, 1, 3] = float("nan")
    out = FusedCausalAttention.apply(*(x.transpose(1, 2) for x in (q, k, v)), 0.3)
    assert out[0, 1, 7].isnan().all()  # that query's row
    assert not out[0, 1, :7].isnan().any() and not out[0, 0].isnan().any()  # the others


def test_fused_kernel_is_built_where_a_compiler_exists():
    """On CI and dev machines (g++ present) the fast path must actually be the one taken."""
    if shutil.which("g++") is None and shutil.which("c++") is None:
        pytest.skip("no C++ compiler here: training uses the blocked kernel (tested above)")
    assert fused_attention.library() is not None, fused_attention.unavailable_reason()
    assert attention.cpu_kernel("cpu", 128) == "fused"
    assert attention.describe("cpu", 128).startswith("fused CPU kernel")
    q, k, v = _inputs(1, 16, 2, 8, 8)
    out = causal_attention(*(x.transpose(1, 2) for x in (q, k, v)), 0.3)
    assert "FusedCausalAttentionBackward" in _nodes(out)


def test_build_is_cached_per_directory(tmp_path, monkeypatch):
    if shutil.which("g++") is None and shutil.which("c++") is None:
        pytest.skip("no C++ compiler here")
    monkeypatch.setenv("MOETUNE_CACHE_DIR", str(tmp_path))
    compiler = shutil.which("g++") or shutil.which("c++")
    first = fused_attention._build(compiler)
    assert first.parent == tmp_path / "kernels" and first.exists()
    mtime = first.stat().st_mtime_ns
    assert fused_attention._build(compiler) == first and first.stat().st_mtime_ns == mtime
    assert [p.name for p in first.parent.iterdir()] == [first.name]  # no temporary left behind


def test_fused_kernel_without_openmp_uses_its_own_threads(tmp_path, monkeypatch):
    """The build for compilers without OpenMP (std::thread) computes the same results."""
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler here")
    monkeypatch.setenv("MOETUNE_CACHE_DIR", str(tmp_path))
    q, k, v = _inputs(2, 50, 3, 24, 16)
    grad_out = torch.randn(2, 50, 3, 16)
    with_openmp = _grads(FusedCausalAttention.apply, q, k, v, grad_out)
    lib = fused_attention.load(fused_attention._build(compiler, fused_attention.FLAGS))
    assert not hasattr(lib, "omp_get_thread_num")  # really the build without OpenMP
    monkeypatch.setattr(fused_attention, "library", lambda: lib)
    without = _grads(FusedCausalAttention.apply, q, k, v, grad_out)
    for a, b in zip(with_openmp, without):
        assert torch.equal(a, b)


@pytest.fixture
def fresh_library():
    """library() forgets its cached answer before and after the test."""
    fused_attention.library.cache_clear()
    yield
    fused_attention.library.cache_clear()
    fused_attention._unavailable.clear()


def test_disabled_fused_kernel_falls_back_to_blocked(monkeypatch, fresh_library):
    monkeypatch.setenv("MOETUNE_FUSED_ATTENTION", "0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # asked for: no warning
        assert attention.cpu_kernel("cpu", 128) == "blocked"
    assert "fused kernel unavailable: disabled" in attention.describe("cpu", 128)
    assert attention.cpu_kernel("cpu", attention.BLOCKED_MAX_SEQ + 1) is None
    q, k, v = _inputs(1, 16, 2, 8, 8)
    out = causal_attention(*(x.transpose(1, 2) for x in (q, k, v)), 0.3)
    assert "BlockedCausalAttentionBackward" in _nodes(out)


def test_unwritable_cache_home_falls_back_to_a_temp_dir(tmp_path, monkeypatch):
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("")  # a file where the cache directory would have to be created
    monkeypatch.delenv("MOETUNE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    assert fused_attention.cache_dir().parent == tmp_path / "tmp"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # writable: used
    assert fused_attention.cache_dir() == tmp_path / "cache" / "moetune" / "kernels"


def test_failed_build_warns_once_and_falls_back(monkeypatch, tmp_path, fresh_library):
    broken = tmp_path / "broken-c++"  # answers --version, fails every compile
    broken.write_text('#!/bin/sh\n[ "$1" = --version ] && echo broken 1.0 && exit 0\n'
                      'echo "error: no" >&2; exit 1\n')
    broken.chmod(0o755)
    monkeypatch.setenv("MOETUNE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", str(broken))
    with pytest.warns(RuntimeWarning, match="fused CPU attention unavailable .build failed"):
        assert attention.cpu_kernel("cpu", 128) == "blocked"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once, not on every call
        assert attention.cpu_kernel("cpu", 128) == "blocked"
    assert "build failed" in attention.describe("cpu", 128)
    assert "error: no" in fused_attention.unavailable_reason()  # the compiler's own message
    assert not list((tmp_path / "cache").rglob("*"))[1:]  # the kernels dir, nothing in it


def test_describe_names_the_path_dispatch_takes():
    assert attention.describe("cpu", attention.FUSED_MAX_SEQ + 1).startswith("torch SDPA")
    assert attention.describe("cuda", 128).startswith("torch SDPA")


def test_long_sequences_take_sdpa():
    t = attention.FUSED_MAX_SEQ + 1
    q, k, v = _inputs(1, t, 2, 8, 8)
    out = _grads(causal_attention, q, k, v, torch.ones(1, t, 2, 8))[0]
    assert not {"FusedCausalAttentionBackward", "BlockedCausalAttentionBackward"} & _nodes(out)
    ref = _grads(_reference, q, k, v, torch.ones(1, t, 2, 8))[0]
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
