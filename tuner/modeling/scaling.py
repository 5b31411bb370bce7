"""Scaling rules from a tuned proxy recipe to the full run, each returned with its source.

- LR, µP study (proxy ``mup_base_dim > 0``): the tuned LR is the µP base LR and transfers
  unchanged; hidden matrices train at lr / width_mult with width_mult = full dim / base dim
  (Tensor Programs V). Otherwise the DeepSeek LLM compute law: η_opt ∝ C^−0.125, so
  lr_full = lr_proxy · (C_full / C_proxy)^−0.125 with C = M·D.
- Batch: final batch from B_opt = 0.2920·C^0.3271 tokens (or the user's global batch), the
  tuned ramp kept as shape: start/end ratio and ramp length as fractions of tokens.
- Warmup: in optimizer steps, the proxy's tuned count when it spans at least 2/(1−β2) updates
  (Ma & Yarats 2021), else the published 2000 (DeepSeek LLM, DeepSeek-V3).
- γ (bias update speed, per step): γ_proxy · lr_full / lr_proxy.
- Decay: kept as a fraction of tokens; step counts derived from the batch schedule.
- Checkpoint ratio: the smallest whole-block ratio whose modeled per-GPU peak fits within a
  fraction (default 0.9) of GPU memory under the chosen parallel layout.
- Parallelism: `plan_parallelism` enumerates TP/PP/EP/DP for the GPU count and keeps the layout
  that needs the least recompute, then the least tensor, pipeline and expert parallelism.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainers.config.model_args import ModelArgs
from trainers.config.recipe import Recipe
from trainers.config.schedules import batch_size_at
from tuner.modeling.cost_model import (
    ParallelPlan,
    fits,
    memory_per_gpu,
    non_embedding_flops_per_token,
    stage_layers,
)
from tuner.modeling.hardware import Hardware
from tuner.modeling.laws.power_law import StudyLaw, deepseek_llm_batch, deepseek_llm_lr
from tuner.modeling.layout_rules import is_launchable

COMPUTE_LAW_SOURCE = ("DeepSeek LLM (Bi et al., 2024), eq. 1: eta_opt = 0.3118*C^-0.1250, "
                      "B_opt = 0.2920*C^0.3271 tokens, C = M*D (M: non-embedding FLOPs/token)")
MUP_SOURCE = ("muP / muTransfer (Yang et al., 2022, Tensor Programs V): Adam LR of hidden "
              "matrices / width_mult, embedding and output LR unchanged")
LR_EXPONENT = -0.1250


@dataclass(frozen=True, kw_only=True)
class Rule:
    """How one full-run value was produced: ``kind`` is scaled | carried | chosen | user."""

    field: str
    value: object
    kind: str
    rule: str
    source: str = ""

    def to_dict(self) -> dict[str, object]:
        return {"field": self.field, "value": self.value, "kind": self.kind, "rule": self.rule,
                "source": self.source}


def compute_budget(a: ModelArgs, seq_len: int, tokens: float) -> float:
    """C = M·D of DeepSeek LLM (FLOPs)."""
    return non_embedding_flops_per_token(a, seq_len) * tokens


def eta_opt(c: float) -> float:
    """DeepSeek LLM's fitted optimal LR for compute C (reported for reference, not applied)."""
    return deepseek_llm_lr(c)


def b_opt_tokens(c: float) -> float:
    """DeepSeek LLM's fitted optimal batch size in tokens for compute C."""
    return deepseek_llm_batch(c)


def scale_lr(proxy: ModelArgs, proxy_lr: float, c_proxy: float, target: ModelArgs,
             c_full: float) -> tuple[float, float, Rule]:
    """Full-run LR, the LR of hidden matrices, and the rule used.

    Returns ``(lr, hidden_lr, rule)``; ``hidden_lr == lr`` without µP.
    """
    if proxy.mup_base_dim:
        width_mult = target.dim / proxy.mup_base_dim
        rule = Rule(field="lr", value=proxy_lr, kind="scaled",
                    rule=(f"muP: base LR transfers unchanged; hidden matrices use lr / width_mult "
                          f"= lr / ({target.dim}/{proxy.mup_base_dim}) = "
                          f"{proxy_lr / width_mult:.4g}"), source=MUP_SOURCE)
        return proxy_lr, proxy_lr / width_mult, rule
    ratio = c_full / c_proxy
    lr = proxy_lr * ratio**LR_EXPONENT
    rule = Rule(field="lr", value=lr, kind="scaled",
                rule=(f"compute law: lr_proxy * (C_full/C_proxy)^-0.125 = {proxy_lr:.4g} * "
                      f"({c_full:.4g}/{c_proxy:.4g})^-0.125 (law's own eta_opt(C_full) = "
                      f"{eta_opt(c_full):.3g}, for reference)"), source=COMPUTE_LAW_SOURCE)
    return lr, lr, rule


LAW_SOURCE = ("this study's [law]: each budget's optimum from a response surface over all its "
              "trials, a power law through them (tuner.study.workflows.law_fit)")


def round_to_multiple(x: float, multiple: int) -> int:
    """Nearest positive multiple of ``multiple``."""
    return max(multiple, multiple * round(x / multiple))


def scale_batch(proxy_recipe: Recipe, *, c_full: float, seq_len: int, multiple: int = 1,
                global_batch: int | None = None, law: StudyLaw | None = None,
                x_full: float = 0.0,
                proposed: tuple[float, str, str] | None = None) -> tuple[int, int, list[Rule]]:
    """Full-run (batch_start, batch_end) in sequences, multiples of ``multiple`` (dp·micro):
    the user's global batch, else ``proposed`` (tokens, rule, source: the anchored answer's,
    `tuner.modeling.anchor.answer.answer_batch`), else the study's own batch law at
    ``x_full``, else DeepSeek LLM's B_opt(C)."""
    if global_batch is None and proposed is not None:
        tokens, said, source = proposed
        end = round_to_multiple(tokens / seq_len, multiple)
        end_rule = Rule(field="batch_end", value=end, kind="scaled",
                        rule=(f"{said} = {tokens / seq_len:.1f} sequences of {seq_len}, rounded "
                              f"to a multiple of dp*micro_batch={multiple}"), source=source)
        law = None
    elif global_batch is None and law is not None and law.batch is not None:
        tokens = law.batch.at(x_full)
        lo, hi = law.batch.band(x_full)
        end = round_to_multiple(tokens / seq_len, multiple)
        end_rule = Rule(field="batch_end", value=end, kind="scaled",
                        rule=(f"the study's own law ({law.name}): B*({x_full:.4g}) = "
                              f"{law.batch.coef:.4g}*x^{law.batch.exponent:.4f} = {tokens:.4g} "
                              f"tokens (band [{lo:.3g}, {hi:.3g}], "
                              f"{law.batch.decades_past(x_full):.1f} decades past the fitted "
                              f"budgets) = {tokens / seq_len:.1f} sequences of {seq_len}, "
                              f"rounded to a multiple of dp*micro_batch={multiple}"),
                        source=LAW_SOURCE)
    elif global_batch is not None:
        end = round_to_multiple(global_batch, multiple)
        end_rule = Rule(field="batch_end", value=end, kind="user",
                        rule=f"--global-batch {global_batch}, rounded to a multiple of "
                             f"dp*micro_batch={multiple}")
    if global_batch is None and proposed is None and (law is None or law.batch is None):
        tokens = b_opt_tokens(c_full)
        end = round_to_multiple(tokens / seq_len, multiple)
        end_rule = Rule(field="batch_end", value=end, kind="scaled",
                        rule=(f"B_opt = 0.2920*C^0.3271 = {tokens:.4g} tokens = "
                              f"{tokens / seq_len:.1f} sequences of {seq_len}, rounded to a "
                              f"multiple of dp*micro_batch={multiple}"),
                        source=COMPUTE_LAW_SOURCE)
    if proxy_recipe.batch_schedule == "constant":
        return end, end, [end_rule, Rule(field="batch_start", value=end, kind="carried",
                                         rule="constant batch schedule: batch_start = batch_end")]
    shape = proxy_recipe.batch_start / proxy_recipe.batch_end
    start = min(end, round_to_multiple(end * shape, multiple))
    asked = (f"batch_start/batch_end = {proxy_recipe.batch_start}/{proxy_recipe.batch_end} = "
             f"{shape:.4g} of the final batch {end} = {end * shape:.1f} sequences")
    if start < end:
        rule = (f"ramp shape kept: {asked}, rounded to a multiple of dp*micro_batch={multiple} "
                f"({start / end:.4g} of it)")
    else:
        rule = (f"ramp collapsed: {asked}, which rounds to the final batch at multiples of "
                f"dp*micro_batch={multiple}: no ramp is left, the batch is constant")
    start_rule = Rule(field="batch_start", value=start, kind="scaled", rule=rule)
    return start, end, [end_rule, start_rule]


@dataclass(frozen=True, kw_only=True)
class StepCounts:
    """Optimizer steps of a run, derived by walking the batch schedule over the tokens."""

    total: int
    warmup: int
    ramp: int
    decay_start: int
    samples: int
    warmup_samples: int
    ramp_samples: int
    decay_samples: int


def step_counts(recipe: Recipe, tokens: int) -> StepCounts:
    """Walk ``batch_size_at`` (the proxy's own schedule) over ``tokens``: steps and samples.

    ``decay_start``: step where LR starts to fall (after warmup for cosine/multistep, at
    1 − decay_fraction for wsd). Samples are sequences of ``recipe.seq_len``.
    """
    seen = steps = 0
    marks = {"warmup": recipe.warmup_fraction, "ramp": recipe.batch_ramp_fraction,
             "decay": 1.0 - recipe.decay_fraction if recipe.decay == "wsd"
             else recipe.warmup_fraction}
    at: dict[str, tuple[int, int]] = {}
    while seen < tokens:
        for name, frac in marks.items():
            if name not in at and seen >= frac * tokens:
                at[name] = (steps, seen // recipe.seq_len)
        step_tokens = batch_size_at(recipe, seen, tokens) * recipe.seq_len
        n = 1 + _same_batch_steps(recipe, seen, tokens, step_tokens, marks, at)
        seen += n * step_tokens
        steps += n
    end = (steps, seen // recipe.seq_len)
    get = {n: at.get(n, end) for n in marks}
    return StepCounts(total=steps, warmup=get["warmup"][0], ramp=get["ramp"][0],
                      decay_start=get["decay"][0], samples=end[1],
                      warmup_samples=get["warmup"][1], ramp_samples=get["ramp"][1],
                      decay_samples=end[1] - get["decay"][1])


def _same_batch_steps(recipe: Recipe, seen: int, tokens: int, step_tokens: int,
                      marks: dict[str, float], at: dict) -> int:
    """How many steps after the one at `seen` keep its batch and reach no mark: the walk jumps
    them at once (a full run has millions of steps).

    Every batch schedule is monotonic in tokens, so the steps that keep the batch are a prefix
    and a binary search finds them; marks are kept one step away so the walk decides them.
    """
    due = [f * tokens for name, f in marks.items() if name not in at and f * tokens > seen]
    limit = max(0, int((min(due + [tokens]) - seen) // step_tokens) - 1)
    batch = step_tokens // recipe.seq_len
    lo, hi = 0, limit  # invariant: the first lo steps keep the batch
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if batch_size_at(recipe, seen + mid * step_tokens, tokens) == batch:
            lo = mid
        else:
            hi = mid - 1
    return lo


def checkpoint_grid(a: ModelArgs, pp: int) -> list[float]:
    """Ratios that recompute a whole number of blocks on the largest stage: 0, 1/n, …, 1."""
    n = max(len(r) for r in stage_layers(a.n_layers, pp))
    return [k / n for k in range(n + 1)]


def choose_checkpoint_ratio(a: ModelArgs, plan: ParallelPlan, hw: Hardware, *, seq_len: int,
                            micro_batch: int, precision: str,
                            fraction: float = 0.9) -> float | None:
    """Smallest checkpoint ratio whose modeled peak fits ``fraction`` of memory; None if none."""
    for r in checkpoint_grid(a, plan.pp):
        est = memory_per_gpu(a, plan, seq_len=seq_len, micro_batch=micro_batch,
                             precision=precision, checkpoint_ratio=r)
        if fits(est, hw, fraction):
            return r
    return None


@dataclass(frozen=True, kw_only=True)
class PlanChoice:
    """A parallel layout with the checkpoint ratio the memory model chose for it."""

    plan: ParallelPlan
    checkpoint_ratio: float
    peak_gib: float


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidate_plans(a: ModelArgs, gpus: int, hw: Hardware, *, tp: int | None = None,
                    pp: int | None = None, ep: int | None = None) -> list[ParallelPlan]:
    """Layouts of ``gpus`` the launch consumers accept (`layout_rules.is_launchable`: tp
    divides n_heads, pp <= n_layers, ep divides n_routed_experts and tp·dp), with tp within a
    node unless the user fixed it. Given degrees are held fixed."""
    plans = []
    for t in _divisors(gpus):
        if (tp is None and t > hw.gpus_per_node) or (tp is not None and t != tp):
            continue
        for p in _divisors(gpus // t):
            if pp is not None and p != pp:
                continue
            for e in _divisors(gpus // p):
                if (ep is None or e == ep) and is_launchable(a, gpus, tp=t, pp=p, ep=e):
                    plans.append(ParallelPlan(tp=t, pp=p, ep=e, dp=gpus // (t * p)))
    return plans


def plan_parallelism(a: ModelArgs, gpus: int, hw: Hardware, *, seq_len: int, micro_batch: int,
                     precision: str, fraction: float = 0.9, tp: int | None = None,
                     pp: int | None = None, ep: int | None = None) -> PlanChoice | None:
    """The layout that fits with the least recompute, then the least tp, pp and ep; None if no
    layout of ``gpus`` fits even with full recompute."""
    best: tuple[tuple[float, int, int, int], PlanChoice] | None = None
    for plan in candidate_plans(a, gpus, hw, tp=tp, pp=pp, ep=ep):
        r = choose_checkpoint_ratio(a, plan, hw, seq_len=seq_len, micro_batch=micro_batch,
                                    precision=precision, fraction=fraction)
        if r is None:
            continue
        key = (r, plan.tp, plan.pp, plan.ep)
        if best is None or key < best[0]:
            peak = memory_per_gpu(a, plan, seq_len=seq_len, micro_batch=micro_batch,
                                  precision=precision, checkpoint_ratio=r).total_gib
            best = (key, PlanChoice(plan=plan, checkpoint_ratio=r, peak_gib=peak))
    return best[1] if best else None


def propose_gpus(a: ModelArgs, gpus: int, hw: Hardware, *, seq_len: int, micro_batch: int,
                 precision: str, fraction: float = 0.9,
                 max_factor: int = 64) -> tuple[int, PlanChoice] | None:
    """When nothing fits on ``gpus``: the smallest power-of-two multiple of it that fits."""
    factor = 2
    while factor <= max_factor:
        choice = plan_parallelism(a, gpus * factor, hw, seq_len=seq_len,
                                  micro_batch=micro_batch, precision=precision,
                                  fraction=fraction)
        if choice is not None:
            return gpus * factor, choice
        factor *= 2
    return None


WARMUP_SOURCE = ("Ma & Yarats, 2021 (arXiv:1910.04209), 'On the adequacy of untuned warmup "
                 "for adaptive optimization': warmup is a number of Adam updates, about "
                 "2/(1-beta2); DeepSeek LLM (arXiv:2401.02954) 2.3 and DeepSeek-V3 (arXiv:"
                 "2412.19437) 4.2 warm up 2000 steps at 7B-671B")
PUBLISHED_WARMUP_STEPS = 2000  # DeepSeek LLM 2.3, DeepSeek-V3 4.2
GAMMA_SOURCE = ("aux-loss-free balancing (Wang et al., 2024, arXiv:2408.15664, eq. 3): the "
                "bias moves by gamma per step; the rule keeps its pace to the router's own "
                "per-step change, which Adam sets by the LR (gamma/lr kept)")


def tokens_after_steps(recipe: Recipe, tokens: int, steps: int) -> int:
    """Tokens consumed by the first ``steps`` steps of ``recipe``'s batch schedule."""
    seen = 0
    for _ in range(steps):
        if seen >= tokens:
            break
        seen += batch_size_at(recipe, seen, tokens) * recipe.seq_len
    return seen


def warmup_steps(proxy: Recipe, proxy_tokens: int) -> tuple[int, int, bool]:
    """(full-run warmup steps, the proxy's tuned warmup steps, whether the proxy informed it).

    Warmup counts Adam updates, so it transfers in steps, not as a share of tokens. The proxy
    informs it when its tuned warmup spans at least 2/(1-beta2) updates (the untuned warmup of
    Ma & Yarats); a shorter one says nothing about a long run, and the published 2000 steps
    are used instead.
    """
    tuned = step_counts(proxy, proxy_tokens).warmup
    informed = tuned >= math.ceil(2 / (1 - proxy.beta2))
    return (tuned if informed else PUBLISHED_WARMUP_STEPS), tuned, informed


def warmup_rule(recipe: Recipe, steps: StepCounts, *, tuned: int, informed: bool) -> Rule:
    floor = math.ceil(2 / (1 - recipe.beta2))
    why = (f"the proxy's tuned warmup of {tuned} steps, kept in steps" if informed else
           f"the proxy's tuned warmup of {tuned} steps is under 2/(1-beta2) = {floor} updates "
           f"and cannot inform a long run: the published {PUBLISHED_WARMUP_STEPS} steps")
    return Rule(field="warmup_fraction", value=recipe.warmup_fraction, kind="scaled",
                rule=(f"warmup in optimizer steps: {why} = {steps.warmup} steps / "
                      f"{steps.warmup_samples} sequences = {recipe.warmup_fraction:.4g} of the "
                      f"full run's tokens"), source=WARMUP_SOURCE)


def scale_gamma(proxy: Recipe, lr_full: float) -> tuple[float, Rule]:
    """The full run's bias update speed γ: γ_proxy · lr_full / lr_proxy (γ/lr kept)."""
    gamma = proxy.bias_update_speed * lr_full / proxy.lr
    return gamma, Rule(field="bias_update_speed", value=gamma, kind="scaled",
                       rule=(f"per-step rate, kept in proportion to the LR: gamma_proxy * "
                             f"lr_full/lr_proxy = {proxy.bias_update_speed:.4g} * "
                             f"{lr_full:.4g}/{proxy.lr:.4g}"), source=GAMMA_SOURCE)


def lr_steps_note(recipe: Recipe, steps: StepCounts) -> str:
    """Human summary of where the LR schedule's phases fall, in steps."""
    return (f"{steps.total} steps; warmup to step {steps.warmup}; decay ({recipe.decay}) from "
            f"step {steps.decay_start}; batch ramp ends at step {steps.ramp}")

