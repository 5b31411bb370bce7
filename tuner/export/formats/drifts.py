"""Where a launch consumer computes something other than what the proxy trained, and how much.

One home for the differences several formats share, each with its size, so every format says
the same thing in the same words:

- `group_score_mismatch`: group-limited routing. DeepSeek's own ``Gate``
  (deepseek-ai/DeepSeek-V3@9b4e9788 ``inference/model.py``) and the proxy by default
  (`trainers.nn.moe.Gate`, ``group_score = "auto"``) score a group by its best expert when the gate
  has no balancing bias, by the sum of its two best with one; HF's DeepseekV2
  (``group_limited_greedy``) by the max, DeepseekV3 (``noaux_tc``) by the top-2 sum;
  Megatron-LM's ``group_limited_topk`` (NVIDIA/Megatron-LM@d98e8a64
  ``megatron/core/transformer/moe/moe_utils.py``) by the sum of the top ``topk / group_topk``
  (2 for DeepSeek's configs) and torchtitan's ``TokenChoiceTopKRouter`` (0.3.0
  ``models/common/moe.py``) by the top-2 sum, whatever the bias. The size is the share of
  tokens whose expert set differs, measured with the proxy's own gate at the target's shape
  (router at initialization, seed 0, 4096 tokens): modeled, not a trained router. A proxy
  with ``group_score = "sum_top2"`` trains the routing Megatron-LM and torchtitan run.
- `multistep_gap`: a multistep decay written as cosine; the largest LR gap as a share of peak,
  and both end values.
- `BLOCK_CAUSAL`: torchtitan 0.3 masks attention by document; the proxy attends causally
  across documents packed into a sequence.
- `mup_note`: a µP recipe in a consumer that applies no µP init or output multiplier (Megatron-LM,
  torchtitan): which LR the file writes for which parameters, and what the run would need.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING

from trainers.config.schedules import lr_at

if TYPE_CHECKING:
    from trainers.config.model_args import ModelArgs
    from tuner.modeling.full_run import FullRun

MEASURE_TOKENS = 4096
BLOCK_CAUSAL = ("attention mask: torchtitan 0.3 always masks block-causally by document "
                "(models/common/config_utils.py get_attention_config); the proxy attends "
                "causally across the documents packed into a sequence, so tokens after a "
                "document boundary see less context than they did in the proxy")


@functools.lru_cache(maxsize=32)
def group_score_mismatch(a: ModelArgs) -> float:
    """Share of tokens whose expert set differs between a max and a top-2-sum group score.

    The proxy's `trainers.nn.moe.Gate` at ``a``'s router shape with ``group_score`` ``max`` and
    ``sum_top2`` and the same weights (drawn with ``init_std``, seed 0, no balancing bias), on
    `MEASURE_TOKENS` unit-normal tokens.
    """
    import torch

    from trainers.nn.moe import Gate

    torch.manual_seed(0)
    plain = Gate(dataclasses.replace(a, gate_bias=False, group_score="max"))
    torch.nn.init.normal_(plain.weight, std=a.init_std)
    summed = Gate(dataclasses.replace(a, gate_bias=False, group_score="sum_top2"))
    summed.weight = plain.weight
    x_ND = torch.randn(MEASURE_TOKENS, a.dim)
    with torch.no_grad():
        idx_max = plain(x_ND)[1].sort(dim=-1)[0]
        idx_sum = summed(x_ND)[1].sort(dim=-1)[0]
    return float((idx_max != idx_sum).any(dim=-1).float().mean())


def _words(rule: str) -> str:
    return "its best score" if rule == "max" else f"the sum of its top-{rule[7:]} scores"


def group_score_warning(full: FullRun, consumer: str, rule: str) -> list[str]:
    """A note when ``consumer`` scores groups by ``rule`` and the proxy by the other."""
    a = full.model_args
    if a.n_expert_groups <= 1 or a.n_limited_groups >= a.n_expert_groups \
            or a.group_rule == rule:
        return []
    size = ("" if rule not in ("max", "sum_top2") else
            f": {100 * group_score_mismatch(a):.0f}% of tokens pick a different expert set "
            f"(modeled: router at initialization, {MEASURE_TOKENS} tokens)")
    fix = ("; tune the proxy with [model] group_score = \"sum_top2\" to tune what will run"
           if rule == "sum_top2" else "")
    return [f"group-limited routing: {consumer} scores an expert group by {_words(rule)}, the "
            f"proxy by {_words(a.group_rule)}{size}{fix}"]


def multistep_gap(full: FullRun, samples: int = 2000) -> tuple[float, float, float]:
    """(largest |LR_multistep − LR_cosine| / peak, multistep's final LR / peak, cosine's)."""

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
    """Megatron-LM's ``group_limited_topk`` sums each group's top ``topk / group_topk``."""
    a = full.model_args
    per = max(1, a.n_activated_experts // max(1, a.n_limited_groups))
    return group_score_warning(full, "Megatron-LM", f"sum_top{per}")


def mup_note(full: FullRun, consumer: str, lr_knobs: str) -> str:
    """What a µP recipe's LR assumes in ``consumer``, which applies no µP init or output
    multiplier, and what the run would need; ``lr_knobs`` says how its LR flags express µP."""
    a, r = full.model_args, full.recipe
    mult = a.dim / a.mup_base_dim
    return (f"muP (base width {a.mup_base_dim}, width_mult {a.dim}/{a.mup_base_dim} = "
            f"{mult:.4g}): the study tuned the base LR {r.lr:.4g} (embeddings, head, norms); "
            f"the hidden matrices, nearly every parameter, train at lr / width_mult = "
            f"{full.hidden_lr:.4g}. {lr_knobs} {consumer} applies no muP init (hidden matrices' "
            f"std x 1/sqrt(width_mult) = x{mult ** -0.5:.3g}) and no output multiplier (logits "
            f"x 1/width_mult = x{1 / mult:.3g}): launched as it is, the run is standard "
            "parametrization at muP's LRs, which the proxy never trained. To train what the "
            "proxy tuned, the model needs both multipliers (a code change in the consumer), or "
            "tune a proxy without muP ([model] mup_base_dim = 0), whose LR moves by the compute "
            "law and needs neither")
