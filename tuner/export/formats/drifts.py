"""Where a launch consumer computes something other than what the proxy trained, and how much.

One home for the differences several formats share, each with its size, so every format says
the same thing in the same words:

- `group_score_mismatch`: group-limited routing. DeepSeek's own ``Gate``
  (deepseek-ai/DeepSeek-V3@9b4e9788 ``inference/model.py``), HF's DeepseekV2 and the proxy
  (`trainers.moe.Gate`) score a group by its best expert when the gate has no balancing bias,
  by the sum of its two best with one; Megatron-LM's ``group_limited_topk``
  (NVIDIA/Megatron-LM@d98e8a64 ``megatron/core/transformer/moe/moe_utils.py``) and torchtitan's
  ``TokenChoiceTopKRouter`` (0.3.0 ``models/common/moe.py``) always by the sum of the top
  ``k / group_topk`` (Megatron) or top 2 (torchtitan). The size is the share of tokens whose
  expert set differs, measured with the proxy's own gate at the target's shape (router at
  initialization, seed 0, 4096 tokens): modeled, not a trained router.
- `multistep_gap`: a multistep decay written as cosine; the largest LR gap as a share of peak,
  and both end values.
- `BLOCK_CAUSAL`: torchtitan 0.3 masks attention by document; the proxy attends causally
  across documents packed into a sequence.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING

from trainers.model_args import ModelArgs

if TYPE_CHECKING:
    from tuner.modeling.full_run import FullRun

MEASURE_TOKENS = 4096
BLOCK_CAUSAL = ("attention mask: torchtitan 0.3 always masks block-causally by document "
                "(models/common/config_utils.py get_attention_config); the proxy attends "
                "causally across the documents packed into a sequence, so tokens after a "
                "document boundary see less context than they did in the proxy")


def group_score(a: ModelArgs) -> str:
    """How the proxy scores an expert group: ``max`` (no balancing bias) or ``sum_top2``."""
    return "sum_top2" if a.gate_bias else "max"


@functools.lru_cache(maxsize=32)
def group_score_mismatch(a: ModelArgs) -> float:
    """Share of tokens whose expert set differs between a max and a top-2-sum group score.

    The proxy's `trainers.moe.Gate` at ``a``'s router shape, weights drawn with ``init_std``
    (seed 0), on `MEASURE_TOKENS` unit-normal tokens; the top-2-sum gate is the same gate with
    a zero balancing bias (the bias switches the group score, zeros leave the scores alone).
    """
    import torch

    from trainers.moe import Gate

    torch.manual_seed(0)
    plain = Gate(dataclasses.replace(a, gate_bias=False))
    torch.nn.init.normal_(plain.weight, std=a.init_std)
    summed = Gate(dataclasses.replace(a, gate_bias=True))
    summed.weight = plain.weight
    x_ND = torch.randn(MEASURE_TOKENS, a.dim)
    with torch.no_grad():
        idx_max = plain(x_ND)[1].sort(dim=-1)[0]
        idx_sum = summed(x_ND)[1].sort(dim=-1)[0]
    return float((idx_max != idx_sum).any(dim=-1).float().mean())


def group_score_warning(full: FullRun, consumer: str, rule: str) -> list[str]:
    """A warning when ``consumer`` scores groups by ``rule`` and the proxy by the other."""
    a = full.model_args
    if a.n_expert_groups <= 1 or a.n_limited_groups >= a.n_expert_groups \
            or group_score(a) == rule:
        return []
    share = group_score_mismatch(a)
    theirs = "the sum of its top-2 scores" if rule == "sum_top2" else "its best score"
    return [f"group-limited routing: {consumer} scores an expert group by {theirs}, the proxy "
            f"(as DeepSeek's Gate without a balancing bias) by {_ours(a)}: "
            f"{100 * share:.0f}% of tokens pick a different expert set (modeled: router at "
            f"initialization, {MEASURE_TOKENS} tokens); the run routes otherwise than the "
            "recipe was tuned"]


def _ours(a: ModelArgs) -> str:
    return "its best score" if group_score(a) == "max" else "the sum of its top-2 scores"


def multistep_gap(full: FullRun, samples: int = 2000) -> tuple[float, float, float]:
    """(largest |LR_multistep − LR_cosine| / peak, multistep's final LR / peak, cosine's)."""
    from trainers.schedules import lr_at

    r, budget = full.recipe, 10**9
    cos = dataclasses.replace(r, decay="cosine")
    gap = max(abs(lr_at(r, t, budget) - lr_at(cos, t, budget))
              for t in (budget * i // samples for i in range(samples)))
    end = budget - 1
    return gap / r.lr, lr_at(r, end, budget) / r.lr, lr_at(cos, end, budget) / r.lr


def multistep_note(full: FullRun, consumer: str) -> str:
    gap, ours, theirs = multistep_gap(full)
    return (f"decay 'multistep' (x0.316 at 80%, x0.1 at 90% of tokens) has no counterpart in "
            f"{consumer}: written as cosine, the LR differs by up to {gap:.2f} x peak and ends "
            f"at {theirs:.3g} x peak instead of {ours:.3g} x peak")


def torchtitan(full: FullRun) -> list[str]:
    """What torchtitan 0.3 computes otherwise than the proxy, with no setting to change it."""
    return [*group_score_warning(full, "torchtitan 0.3", "sum_top2"), BLOCK_CAUSAL]


def megatron(full: FullRun) -> list[str]:
    return group_score_warning(full, "Megatron-LM", "sum_top2")
