"""DeepSeek-V3 MoE: gate (with aux-loss-free balancing bias), routed experts, shared experts.

Legend: B batch, T sequence, D model dim, I expert inner dim, E routed experts, K experts per
token, G expert groups, N = B·T tokens, A = N·K token-expert assignments.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from trainers.config.model_args import ModelArgs
from trainers.nn import fusion
from trainers.nn.fp8 import Backend, fp8_linear
from trainers.nn.mlp import MLP


class Gate(nn.Module):
    """Router: scores → (bias-adjusted, group-limited) top-k selection → combine weights.

    The bias only steers *selection*; the combine weights come from the pre-bias scores
    (DeepSeek-V3 §2.1.2). Gating runs in fp32 whatever the training precision.
    """

    bias: torch.Tensor | None  # a registered buffer, None without aux-loss-free balancing

    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.args = args
        self.weight = nn.Parameter(torch.empty(args.n_routed_experts, args.dim))
        bias = torch.zeros(args.n_routed_experts, dtype=torch.float32) if args.gate_bias else None
        self.register_buffer("bias", bias)

    def forward(self, x_ND: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Returns combine weights (N, K), expert indices (N, K) and pre-bias scores (N, E)."""
        a = self.args
        with torch.autocast(x_ND.device.type, enabled=False):
            logits_NE = F.linear(x_ND.float(), self.weight.float())
        if a.score_func == "softmax":
            scores_NE = logits_NE.softmax(dim=-1)
        else:
            scores_NE = logits_NE.sigmoid()
        choice_NE = scores_NE.detach()
        if self.bias is not None:
            choice_NE = choice_NE + self.bias
        if a.n_expert_groups > 1:
            choice_NE = self._limit_groups(choice_NE)
        idx_NK = choice_NE.topk(a.n_activated_experts, dim=-1)[1]
        weights_NK = scores_NE.gather(1, idx_NK)
        if a.score_func == "sigmoid":
            weights_NK = weights_NK / weights_NK.sum(dim=-1, keepdim=True)
        return weights_NK * a.route_scale, idx_NK, scores_NE

    def _limit_groups(self, choice_NE: torch.Tensor) -> torch.Tensor:
        """Keep only the best `n_limited_groups` groups, scored by `ModelArgs.group_rule`
        (by default as DeepSeek's Gate: max without a bias, top-2 sum with one)."""
        a = self.args
        n = choice_NE.shape[0]
        choice_NGe = choice_NE.view(n, a.n_expert_groups, -1)
        if a.group_rule == "max":
            group_NG = choice_NGe.amax(dim=-1)
        else:
            group_NG = choice_NGe.topk(2, dim=-1)[0].sum(dim=-1)
        keep_NG = group_NG.topk(a.n_limited_groups, dim=-1)[1]
        drop_NG = torch.ones_like(group_NG, dtype=torch.bool).scatter_(1, keep_NG, False)
        return choice_NGe.masked_fill(drop_NG.unsqueeze(-1), float("-inf")).flatten(1)


class RoutedExperts(nn.Module):
    """E SwiGLU experts stored as stacked weights, run on token slices sorted by expert.

    Dispatch has no per-token Python loop: assignments are sorted by expert so each expert's
    tokens are one contiguous slice; `torch._grouped_mm` runs all slices in one call (15× a
    Python loop on an H200, 1.7× on CPU), a loop over *experts* is the fallback and the fp8 path.
    """

    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        e, d, i = args.n_routed_experts, args.dim, args.moe_inter_dim
        # gate (w1) and up (w3) projections stacked on the output dim: one GEMM instead of two
        self.w13_EDJ = nn.Parameter(torch.empty(e, d, 2 * i))  # J = 2I
        self.w2_EID = nn.Parameter(torch.empty(e, i, d))  # down projection
        self.inter_dim = i
        self.fp8: Backend | None = None  # an fp8 back end runs the looped path
        self.use_grouped_mm = hasattr(torch, "_grouped_mm")

    def forward(self, x_AD: torch.Tensor, counts_E: torch.Tensor) -> torch.Tensor:
        """`x_AD` holds assignments sorted by expert; `counts_E` how many each expert has."""
        if self.use_grouped_mm and not self.fp8 and _grouped_mm_supports(x_AD):
            return self._grouped(x_AD, counts_E)
        return self._looped(x_AD, counts_E)

    def _grouped(self, x_AD: torch.Tensor, counts_E: torch.Tensor) -> torch.Tensor:
        dtype = torch.get_autocast_dtype(x_AD.device.type) if torch.is_autocast_enabled(
            x_AD.device.type) else x_AD.dtype
        offs = counts_E.cumsum(0).to(torch.int32)
        gate_AI, up_AI = torch._grouped_mm(x_AD.to(dtype), self.w13_EDJ.to(dtype),
                                           offs=offs).chunk(2, dim=-1)
        h_AI = fusion.swiglu(gate_AI, up_AI) if fusion.active(x_AD) else F.silu(gate_AI) * up_AI
        return torch._grouped_mm(h_AI, self.w2_EID.to(dtype), offs=offs)

    def _looped(self, x_AD: torch.Tensor, counts_E: torch.Tensor) -> torch.Tensor:
        outs, start = [], 0
        for e, count in enumerate(counts_E.tolist()):
            if count == 0:
                continue
            xe = x_AD[start:start + count]
            start += count
            outs.append(self._expert(xe, e))
        if not outs:
            return x_AD.new_zeros(x_AD.shape)
        return torch.cat(outs)

    def _expert(self, x: torch.Tensor, e: int) -> torch.Tensor:
        w1, w3 = torch.split(self.w13_EDJ[e], self.inter_dim, dim=-1)
        if self.fp8:  # fp8_linear takes (N, K)-shaped weights like nn.Linear; w1, w3 scaled apart
            h = F.silu(fp8_linear(x, w1.t(), self.fp8)) * fp8_linear(x, w3.t(), self.fp8)
            return fp8_linear(h, self.w2_EID[e].t(), self.fp8)
        return (F.silu(x @ w1) * (x @ w3)) @ self.w2_EID[e]


def _grouped_mm_supports(x: torch.Tensor) -> bool:
    # CUDA kernels take bf16 only; the CPU kernel takes fp32 and bf16.
    if x.device.type != "cuda":
        return True
    return torch.is_autocast_enabled("cuda") or x.dtype == torch.bfloat16


class MoE(nn.Module):
    """Shared experts on every token plus K routed experts per token, no capacity limit.

    forward returns the output, the complementary sequence-wise balance loss (unscaled by α) and
    the per-expert load of this batch, which the trainer uses for the bias update and MaxVio.
    """

    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.args = args
        self.gate = Gate(args)
        self.experts = RoutedExperts(args)
        self.shared = MLP(args.dim, args.n_shared_experts * args.moe_inter_dim) \
            if args.n_shared_experts else None

    def forward(self, x_BTD: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, t, d = x_BTD.shape
        x_ND = x_BTD.reshape(-1, d)
        weights_NK, idx_NK, scores_NE = self.gate(x_ND)
        k = idx_NK.shape[1]
        flat_A = idx_NK.flatten()
        order_A = flat_A.argsort(stable=True)
        counts_E = expert_counts(flat_A, self.args.n_routed_experts)
        if fusion.active(x_ND):
            y_ND = self._routed_by_permutation(x_ND, weights_NK, order_A, counts_E)
        else:
            token_A = order_A // k
            # index_select, not x_ND[token_A]: its backward is an index_add_, about 8x the
            # speed of the accumulating index_put_ that advanced indexing backs into on CPU
            y_AD = self.experts(x_ND.index_select(0, token_A), counts_E)
            y_AD = y_AD * weights_NK.flatten()[order_A].unsqueeze(-1).to(y_AD.dtype)
            y_ND = torch.zeros_like(x_ND, dtype=y_AD.dtype).index_add_(0, token_A, y_AD)
        if self.shared is not None:
            y_ND = y_ND + self.shared(x_ND)
        balance = sequence_balance_loss(scores_NE.view(b, t, -1), idx_NK.view(b, t, k))
        return y_ND.view(b, t, d), balance, counts_E.detach()

    def _routed_by_permutation(self, x_ND: torch.Tensor, weights_NK: torch.Tensor,
                               order_A: torch.Tensor, counts_E: torch.Tensor) -> torch.Tensor:
        """The fused paths' dispatch and combine: gathers both ways, no atomic scatter-adds.

        Tokens are cast to the compute dtype before they are repeated K times (a quarter of the
        bytes to move), the experts' rows are put back in token order by the inverse
        permutation, and each token's K rows are combined by one batched weighted sum.
        """
        n, k = weights_NK.shape
        dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") \
            else x_ND.dtype
        inverse_A = torch.empty_like(order_A).scatter_(
            0, order_A, torch.arange(len(order_A), device=order_A.device))
        x_AD = _SortedDispatch.apply(x_ND.to(dtype), order_A, inverse_A, k)
        y_AD = self.experts(x_AD, counts_E)
        y_NKD = _Unsort.apply(y_AD, inverse_A, order_A).view(n, k, -1)
        # profiled on an H200 at proxy-l: cuBLAS runs this (1 x K) @ (K x D) batch with an
        # sm80 wmma kernel, 30 ms of a 258 ms step; a fused multiply-and-sum is the next lever
        return torch.bmm(weights_NK.unsqueeze(1).to(y_NKD.dtype), y_NKD).squeeze(1)


class _SortedDispatch(torch.autograd.Function):
    """Token rows repeated K times in expert order: out[a] = x[order[a] // K].

    Backward puts the gradient rows back in token order (the inverse permutation, a gather) and
    sums each token's K rows, instead of index_select's atomic index_add_.
    """

    @staticmethod
    def forward(ctx, x_ND, order_A, inverse_A, k):
        ctx.save_for_backward(inverse_A)
        ctx.k = k
        return x_ND.index_select(0, order_A // k)

    @staticmethod
    def backward(ctx, g_AD):
        (inverse_A,) = ctx.saved_tensors
        g_NKD = g_AD.index_select(0, inverse_A).view(-1, ctx.k, g_AD.shape[-1])
        return g_NKD.sum(dim=1), None, None, None


class _Unsort(torch.autograd.Function):
    """Rows in expert order back to token order: out = y[inverse]; backward gathers by `order`."""

    @staticmethod
    def forward(ctx, y_AD, inverse_A, order_A):
        ctx.save_for_backward(order_A)
        return y_AD.index_select(0, inverse_A)

    @staticmethod
    def backward(ctx, g_AD):
        (order_A,) = ctx.saved_tensors
        return g_AD.index_select(0, order_A), None, None


def expert_counts(flat_A: torch.Tensor, n_experts: int) -> torch.Tensor:
    """Assignments per expert. On CUDA a scatter-add: bincount reads the largest index back to
    the host to size its output, a synchronisation per call."""
    if flat_A.is_cuda:
        return bincount_free_counts(flat_A, n_experts)
    return torch.bincount(flat_A, minlength=n_experts)


def bincount_free_counts(flat_A: torch.Tensor, n: int) -> torch.Tensor:
    return torch.zeros(n, dtype=torch.long, device=flat_A.device).scatter_add_(
        0, flat_A, torch.ones_like(flat_A))


def sequence_balance_loss(scores_BTE: torch.Tensor, idx_BTK: torch.Tensor) -> torch.Tensor:
    """DeepSeek-V3's complementary sequence-wise balance loss, before multiplying by α.

    Per sequence: f_i = E/(K·T) · #{t: i ∈ topK(t)}, P_i = mean_t s'_{i,t} with s' the scores
    normalised over experts; loss = Σ_i f_i P_i, averaged over the batch's sequences.
    """
    b, t, e = scores_BTE.shape
    k = idx_BTK.shape[-1]
    seq_offset = torch.arange(b, device=idx_BTK.device).view(b, 1, 1) * e
    hits_BE = expert_counts((idx_BTK + seq_offset).flatten(), b * e).view(b, e)
    f_BE = hits_BE * e / (k * t)
    p_BE = (scores_BTE / scores_BTE.sum(dim=-1, keepdim=True)).mean(dim=1)
    return (f_BE * p_BE).sum(dim=-1).mean()


def max_vio(load_E: torch.Tensor) -> float:
    """MaxVio = (max load − mean load) / mean load (Wang et al., 2024)."""
    return float(max_vio_tensor(load_E))


def max_vio_tensor(load_E: torch.Tensor) -> torch.Tensor:
    """`max_vio` as a 0-dim float32 tensor on load_E's device (0 for an empty load), so a
    caller can read several back at once."""
    load = load_E.float()
    mean = load.mean()
    return torch.where(mean > 0, (load.max() - mean) / mean, torch.zeros_like(mean))
