"""The attention core: the blocked CPU path against a float64 reference and the SDPA path."""

import pytest
import torch

from trainers import attention
from trainers.attention import causal_attention


def _reference(q, k, v, scale):
    """Plain causal softmax attention in float64 over (B, H, T, D) inputs."""
    q, k, v = (x.double() for x in (q, k, v))
    t = q.shape[2]
    scores = q @ k.transpose(-1, -2) * scale
    scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return scores.softmax(-1) @ v


def _inputs(b, t, h, dqk, dv, dtype=torch.float32, seed=0):
    """Leaf q, k, v in the token-major (B, T, H, D) layout the model's projections produce."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, t, h, d, generator=g).to(dtype).requires_grad_()
            for d in (dqk, dqk, dv)]


def _took_blocked_path(out) -> bool:
    """Whether BlockedCausalAttention is in out's autograd graph."""
    seen, todo = set(), [out.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if node.name().startswith("BlockedCausalAttention"):
            return True
        todo.extend(n for n, _ in node.next_functions)
    return False


def _grads(fn, q, k, v, grad_out):
    """fn's output and input gradients; fn sees head-major (B, H, T, D) views, as in MLA."""
    out = fn(*(x.transpose(1, 2) for x in (q, k, v)), 0.3).transpose(1, 2)
    return (out, *torch.autograd.grad(out, (q, k, v), grad_out.to(out.dtype)))


# T=1 and 5: fewer rows than one block; 128: one row block; 200 and 300: several row blocks
# with a remainder (the causal block skipping); 2 x 18 heads: several head blocks, remainder.
@pytest.mark.parametrize("t", [1, 5, 128, 200, 300])
def test_blocked_matches_float64_reference(t):
    q, k, v = _inputs(2, t, 18, 24, 16)
    grad_out = torch.randn(2, t, 18, 16, generator=torch.Generator().manual_seed(1))
    ours = _grads(causal_attention, q, k, v, grad_out)
    assert _took_blocked_path(ours[0])  # the path under test
    ref = _grads(_reference, q, k, v, grad_out)
    for name, a, b in zip(("out", "dq", "dk", "dv"), ours, ref):
        torch.testing.assert_close(a.double(), b.double(), rtol=1e-5, atol=1e-5,
                                   msg=lambda m, name=name: f"{name}: {m}")


def test_blocked_matches_padded_sdpa():
    q, k, v = _inputs(3, 96, 4, 12, 20)  # v wider than q/k: the padding goes the other way
    grad_out = torch.randn(3, 96, 4, 20)
    ours = _grads(causal_attention, q, k, v, grad_out)
    sdpa = _grads(attention._padded_sdpa, q, k, v, grad_out)
    for a, b in zip(ours, sdpa):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_bf16_inputs_keep_their_dtype_and_fp32_accuracy():
    q, k, v = _inputs(2, 64, 6, 24, 16, dtype=torch.bfloat16)
    grad_out = torch.randn(2, 64, 6, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # as in training: must not recast
        ours = _grads(causal_attention, q, k, v, grad_out)
    assert all(x.dtype == torch.bfloat16 for x in ours)
    ref = _grads(_reference, q, k, v, grad_out.bfloat16())
    for a, b in zip(ours, ref):
        # computed in fp32 from bf16 inputs: the error is the final rounding to bf16 (2^-8)
        torch.testing.assert_close(a.double(), b.double(), rtol=2 ** -7, atol=2 ** -7)


def test_only_q_k_v_are_saved_for_backward():
    """Flash-style memory: probabilities are recomputed in backward, not kept."""
    q, k, v = _inputs(2, 128, 4, 24, 16)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda x: saved.append(x) or x, lambda x: x):
        attention.BlockedCausalAttention.apply(
            *(x.transpose(1, 2).reshape(8, 128, -1) for x in (q, k, v)), 0.3)
    assert sorted(x.shape[-1] for x in saved) == [16, 24, 24]
    assert all(x.shape[:2] == (8, 128) for x in saved)


def test_describe_names_the_path_dispatch_takes():
    assert attention.describe("cpu", 128).startswith("blocked CPU kernel")
    assert attention.describe("cpu", attention.BLOCKED_MAX_SEQ + 1).startswith("torch SDPA")
    assert attention.describe("cuda", 128).startswith("torch SDPA")


def test_long_sequences_take_sdpa():
    t = attention.BLOCKED_MAX_SEQ + 1
    q, k, v = _inputs(1, t, 2, 8, 8)
    out = _grads(causal_attention, q, k, v, torch.ones(1, t, 2, 8))[0]
    assert not _took_blocked_path(out)
    ref = _grads(_reference, q, k, v, torch.ones(1, t, 2, 8))[0]
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)
