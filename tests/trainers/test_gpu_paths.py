"""The GPU's own code paths, checked on the CPU against the CPU's: same values, same gradients.

On CUDA the model runs fused RMSNorm/rope/SwiGLU (trainers.nn.fusion) and a permutation-based MoE
dispatch; a CPU machine never takes those branches, so each is called here directly on CPU
tensors (eager, uncompiled: the compiled kernel runs the same function).
"""

from __future__ import annotations

import torch

from trainers.config.model_args import ModelArgs
from trainers.nn import fusion
from trainers.nn.model import RMSNorm, apply_rope, rope_frequencies
from trainers.nn.moe import MoE, bincount_free_counts, expert_counts, max_vio, max_vio_tensor


def small_args(**kw) -> ModelArgs:
    base = dict(vocab_size=64, dim=32, inter_dim=64, moe_inter_dim=16, n_layers=2,
                n_dense_layers=1, n_heads=2, n_routed_experts=8, n_shared_experts=1,
                n_activated_experts=2, n_expert_groups=1, n_limited_groups=1,
                q_lora_rank=0, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4,
                v_head_dim=8)
    base.update(kw)
    return ModelArgs(**base)


def test_fused_rms_norm_is_the_models_rmsnorm():
    torch.manual_seed(0)
    norm = RMSNorm(32, 1e-6)
    torch.nn.init.normal_(norm.weight)
    x = torch.randn(3, 5, 32, requires_grad=True)
    ref = norm(x)
    got = fusion.rms_norm.eager(x, norm.weight, 1e-6)
    torch.testing.assert_close(got, ref, rtol=0, atol=0)
    g = torch.randn_like(ref)
    gx_ref, gw_ref = torch.autograd.grad(ref, (x, norm.weight), g)
    gx, gw = torch.autograd.grad(got, (x, norm.weight), g)
    torch.testing.assert_close(gx, gx_ref)
    torch.testing.assert_close(gw, gw_ref)


def test_real_rope_equals_the_complex_rotation():
    args = small_args()
    angles = rope_frequencies(args, 7)
    rope = torch.polar(torch.ones_like(angles), angles)
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(2, 7, 3, 4).to(dtype).requires_grad_()
        ref = apply_rope(x, rope)  # the CPU's complex multiply
        got = fusion.rope.eager(x, torch.view_as_real(rope))
        tol = {} if dtype == torch.float32 else {"rtol": 1e-2, "atol": 1e-2}
        torch.testing.assert_close(got, ref, **tol)
        g = torch.randn_like(ref)
        torch.testing.assert_close(torch.autograd.grad(got, x, g)[0],
                                   torch.autograd.grad(ref, x, g)[0], **tol)


def test_permutation_dispatch_matches_index_add_path():
    torch.manual_seed(0)
    args = small_args()
    moe = MoE(args)
    for p in moe.parameters():
        torch.nn.init.normal_(p, std=0.2)
    x = torch.randn(40, 32, requires_grad=True)
    weights, idx, _ = moe.gate(x)
    flat = idx.flatten()
    order = flat.argsort(stable=True)
    counts = expert_counts(flat, args.n_routed_experts)

    def cpu_path():
        token = order // idx.shape[1]
        y = moe.experts(x.index_select(0, token), counts)
        y = y * weights.flatten()[order].unsqueeze(-1)
        return torch.zeros_like(x).index_add_(0, token, y)

    ref = cpu_path()
    got = moe._routed_by_permutation(x, weights, order, counts)
    torch.testing.assert_close(got, ref)
    g = torch.randn_like(ref)
    params = [x, moe.gate.weight, moe.experts.w13_EDJ, moe.experts.w2_EID]
    got_grads = torch.autograd.grad(got, params, g, retain_graph=True)
    for a, b in zip(got_grads, torch.autograd.grad(ref, params, g)):
        torch.testing.assert_close(a, b)


def test_counts_by_scatter_equal_bincount():
    flat = torch.randint(0, 13, (500,))
    assert torch.equal(bincount_free_counts(flat, 16), torch.bincount(flat, minlength=16))


def test_max_vio_tensor_is_max_vio():
    load = torch.tensor([3, 1, 0, 4])
    assert float(max_vio_tensor(load)) == max_vio(load) == (4 - 2) / 2
    assert float(max_vio_tensor(torch.zeros(4))) == 0.0


def test_fusion_mode_is_checked(monkeypatch):
    fusion.mode.cache_clear()
    monkeypatch.setenv("MOETUNE_FUSION", "fast")
    try:
        try:
            fusion.mode()
        except ValueError as e:
            assert "MOETUNE_FUSION" in str(e) and "'fast'" in str(e)
        else:
            raise AssertionError("a bad MOETUNE_FUSION was accepted")
    finally:
        monkeypatch.delenv("MOETUNE_FUSION")
        fusion.mode.cache_clear()


def test_cpu_never_takes_the_fused_paths(monkeypatch):
    for value in ("compile", "eager", "blocks"):
        monkeypatch.setenv("MOETUNE_FUSION", value)
        fusion.mode.cache_clear()
        assert fusion.active(torch.zeros(1)) is False
    fusion.mode.cache_clear()
