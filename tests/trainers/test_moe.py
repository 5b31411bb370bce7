from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from trainers.nn.model import Transformer
from trainers.nn.moe import MoE, max_vio, sequence_balance_loss


def brute_force_route(gate, x):
    """Per-token reference of DeepSeek-V3's routing, written as plainly as possible."""
    a = gate.args
    per_group = a.n_routed_experts // a.n_expert_groups
    weights, indices = [], []
    for tok in x.float():
        logits = gate.weight.float() @ tok
        s = logits.softmax(-1) if a.score_func == "softmax" else logits.sigmoid()
        biased = s + (gate.bias if gate.bias is not None else 0)
        group_score = []
        for g in range(a.n_expert_groups):
            members = biased[g * per_group:(g + 1) * per_group]
            if a.group_score == "max" or (a.group_score == "auto" and gate.bias is None):
                group_score.append(members.max().item())
            else:
                group_score.append(sorted(members.tolist(), reverse=True)[0]
                                   + sorted(members.tolist(), reverse=True)[1])
        kept = sorted(range(a.n_expert_groups), key=lambda g: -group_score[g])
        kept = kept[: a.n_limited_groups]
        allowed = [e for e in range(a.n_routed_experts) if e // per_group in kept]
        chosen = sorted(allowed, key=lambda e: -biased[e].item())[: a.n_activated_experts]
        w = torch.stack([s[e] for e in chosen])
        if a.score_func == "sigmoid":
            w = w / w.sum()
        weights.append(w * a.route_scale)
        indices.append(chosen)
    return torch.stack(weights), indices


@pytest.mark.parametrize("score_func", ["sigmoid", "softmax"])
@pytest.mark.parametrize("gate_bias", [True, False])
def test_routing_matches_brute_force(tiny_args, score_func, gate_bias):
    args = dataclasses.replace(tiny_args, score_func=score_func, gate_bias=gate_bias)
    moe = MoE(args)
    torch.nn.init.normal_(moe.gate.weight, std=0.5)
    if gate_bias:
        moe.gate.bias.copy_(torch.randn(args.n_routed_experts) * 0.1)
    x = torch.randn(40, args.dim)
    w, idx, _ = moe.gate(x)
    ref_w, ref_idx = brute_force_route(moe.gate, x)
    for t in range(len(x)):
        order = idx[t].tolist()
        assert sorted(order) == sorted(ref_idx[t])
        got = dict(zip(order, w[t].tolist()))
        want = dict(zip(ref_idx[t], ref_w[t].tolist()))
        for e in order:
            assert got[e] == pytest.approx(want[e], rel=1e-5)


@pytest.mark.parametrize("group_score", ["max", "sum_top2"])
@pytest.mark.parametrize("gate_bias", [True, False])
def test_a_fixed_group_score_routes_as_named_whatever_the_bias(tiny_args, group_score,
                                                               gate_bias):
    args = dataclasses.replace(tiny_args, score_func="softmax", gate_bias=gate_bias,
                               group_score=group_score)
    moe = MoE(args)
    torch.nn.init.normal_(moe.gate.weight, std=0.5)
    x = torch.randn(200, args.dim)
    idx = moe.gate(x)[1]
    ref_idx = brute_force_route(moe.gate, x)[1]
    assert [sorted(i) for i in idx.tolist()] == [sorted(i) for i in ref_idx]
    other = MoE(dataclasses.replace(args, group_score="max" if group_score == "sum_top2"
                                    else "sum_top2"))
    other.gate.weight = moe.gate.weight
    assert not torch.equal(other.gate(x)[1].sort(-1)[0], idx.sort(-1)[0])  # the rules differ


def test_group_score_must_be_a_named_rule(tiny_args):
    with pytest.raises(ValueError, match="group_score: must be one of"):
        dataclasses.replace(tiny_args, group_score="mean")


def test_bias_steers_selection_but_not_weights(tiny_args):
    moe = MoE(tiny_args)
    torch.nn.init.normal_(moe.gate.weight, std=0.5)
    x = torch.randn(64, tiny_args.dim)
    w0, idx0, scores = moe.gate(x)
    moe.gate.bias[idx0[0, 0]] = -10.0  # make token 0's favourite expert unattractive
    w1, idx1, _ = moe.gate(x)
    assert idx0[0, 0].item() not in idx1[0].tolist()
    # combine weights still come from the pre-bias scores of the chosen experts
    chosen = scores[0, idx1[0]]
    torch.testing.assert_close(w1[0], chosen / chosen.sum() * tiny_args.route_scale)


def reference_moe(moe, x_BTD):
    """MoE output token by token: shared experts + Σ_k w_k · expert_k(x)."""
    x = x_BTD.reshape(-1, x_BTD.shape[-1])
    w, idx, _ = moe.gate(x)
    ex = moe.experts
    out = []
    for t in range(len(x)):
        y = moe.shared(x[t:t + 1])[0]
        for k in range(idx.shape[1]):
            e = idx[t, k]
            w1, w3 = ex.w13_EDJ[e].split(ex.inter_dim, dim=-1)
            h = F.silu(x[t] @ w1) * (x[t] @ w3)
            y = y + w[t, k] * (h @ ex.w2_EID[e])
        out.append(y)
    return torch.stack(out).view_as(x_BTD)


@pytest.mark.parametrize("grouped", [True, False])
def test_sorted_dispatch_matches_per_token_reference(tiny_args, grouped):
    model = Transformer(tiny_args)
    moe = model.layers[-1].ffn
    moe.experts.use_grouped_mm = grouped
    x = torch.randn(2, 12, tiny_args.dim)
    y, _, load = moe(x)
    torch.testing.assert_close(y, reference_moe(moe, x), rtol=1e-5, atol=1e-5)
    assert load.sum().item() == 2 * 12 * tiny_args.n_activated_experts


def test_grouped_and_looped_experts_have_same_gradients(tiny_args):
    model = Transformer(tiny_args)
    moe = model.layers[-1].ffn
    x = torch.randn(2, 16, tiny_args.dim)
    grads = []
    for grouped in (True, False):
        moe.experts.use_grouped_mm = grouped
        moe.zero_grad()
        y, _, _ = moe(x)
        (y ** 2).sum().backward()
        grads.append(moe.experts.w2_EID.grad.clone())
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-5, atol=1e-6)


def test_balance_loss_formula_by_hand():
    # 1 sequence, T=2 tokens, E=2 experts, K=1: both tokens pick expert 0.
    scores = torch.tensor([[[0.6, 0.2], [0.9, 0.1]]])
    idx = torch.tensor([[[0], [0]]])
    # f = E/(K·T)·count = [2/2·2, 0] = [2, 0]; s' = [[.75,.25],[.9,.1]] -> P0 = 0.825
    assert sequence_balance_loss(scores, idx).item() == pytest.approx(2 * 0.825)


def test_balance_loss_is_one_when_perfectly_balanced():
    scores = torch.full((3, 4, 4), 0.5)
    idx = torch.tensor([[[0], [1], [2], [3]]] * 3)
    assert sequence_balance_loss(scores, idx).item() == pytest.approx(1.0)


def test_max_vio():
    assert max_vio(torch.tensor([10.0, 10.0, 10.0, 10.0])) == 0.0
    assert max_vio(torch.tensor([20.0, 10.0, 5.0, 5.0])) == pytest.approx(1.0)


def test_bias_updates_move_load_toward_balance(tiny_args):
    """Aux-loss-free balancing: sign updates of the bias alone balance a skewed router."""
    args = dataclasses.replace(tiny_args, n_expert_groups=1, n_limited_groups=1)
    moe = MoE(args)
    torch.nn.init.normal_(moe.gate.weight, std=0.02)
    moe.gate.weight.data[0] += 0.5  # expert 0 is everyone's favourite
    x = torch.randn(512, args.dim).abs()
    vios = []
    for _ in range(400):
        _, idx, _ = moe.gate(x)
        load = torch.bincount(idx.flatten(), minlength=args.n_routed_experts).float()
        vios.append(max_vio(load))
        moe.gate.bias += 0.002 * torch.sign(load.mean() - load)
    assert vios[0] > 1.0
    assert sum(vios[-50:]) / 50 < 0.3 * vios[0]  # sign updates oscillate; judge the mean
