"""Scaling rules, the checkpoint-ratio choice and the parallelism planner, hand-computed."""

from __future__ import annotations

import dataclasses
import math

import pytest

from trainers.config.model_args import ModelArgs
from trainers.config.recipe import Recipe
from trainers.presets import PUBLISHED_CONFIGS
from tuner.modeling import cost_model as cm
from tuner.modeling import scaling
from tuner.modeling.hardware import get_hardware

CONFIGS = PUBLISHED_CONFIGS
PROXY = ModelArgs(dim=64, n_layers=2, n_heads=4, inter_dim=128, moe_inter_dim=16,
                  vocab_size=256, n_routed_experts=8, n_activated_experts=2,
                  kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16)


def config(name: str) -> ModelArgs:
    return ModelArgs.from_json(CONFIGS / f"config_{name}.json")


def test_compute_law_lr_on_a_hand_computed_case():
    # C grows 1e8-fold: lr × (1e8)^-0.125 = lr × 10^-1
    lr, hidden, rule = scaling.scale_lr(PROXY, 1e-3, 1e18, config("16B"), 1e26)
    assert lr == pytest.approx(1e-4) and hidden == lr
    assert rule.kind == "scaled" and "DeepSeek LLM" in rule.source


def test_mup_lr_transfers_unchanged_with_hidden_multiplier():
    mup_proxy = dataclasses.replace(PROXY, mup_base_dim=64)
    target = dataclasses.replace(PROXY, dim=256, mup_base_dim=64)
    lr, hidden, rule = scaling.scale_lr(mup_proxy, 2e-3, 1e15, target, 1e20)
    assert lr == 2e-3 and hidden == pytest.approx(2e-3 / 4)  # width_mult = 256/64
    assert "muP" in rule.rule and "Tensor Programs V" in rule.source


def test_compute_law_reproduces_the_facts_for_deepseek_v3():
    # DeepSeek LLM (arXiv:2401.02954) eq. 1, eta = 0.3118 C^-0.125 and B = 0.2920 C^0.3271, at
    # V3's C (non-embedding FLOPs/token x 14.8T tokens): eta ≈ 2.7e-4, B ≈ 31M tokens
    c = scaling.compute_budget(config("671B"), 4096, 14.8e12)
    assert scaling.eta_opt(c) == pytest.approx(2.7e-4, rel=0.03)
    assert scaling.b_opt_tokens(c) == pytest.approx(31e6, rel=0.03)


def test_batch_from_b_opt_keeps_the_ramp_shape_and_divides_by_dp():
    proxy = Recipe(batch_start=8, batch_end=32)
    c = 1e24
    start, end, rules = scaling.scale_batch(proxy, c_full=c, seq_len=4096, multiple=64)
    expected_end = 64 * round(0.292 * c**0.3271 / 4096 / 64)
    assert end == expected_end and end % 64 == 0
    assert start == 64 * round(end / 4 / 64) and start % 64 == 0
    assert [r.field for r in rules] == ["batch_end", "batch_start"]


def test_user_global_batch_wins_over_b_opt():
    start, end, rules = scaling.scale_batch(Recipe(batch_start=8, batch_end=32), c_full=1e24,
                                            seq_len=4096, multiple=16, global_batch=1001)
    assert end == 1008 and rules[0].kind == "user"  # nearest multiple of 16
    assert start == 256  # 1008 / 4 = 252 -> nearest multiple of 16


def test_constant_schedule_has_no_ramp():
    start, end, rules = scaling.scale_batch(Recipe(batch_schedule="constant", batch_start=8,
                                                   batch_end=32), c_full=1e24, seq_len=4096)
    assert start == end and "constant" in rules[1].rule


def test_step_counts_of_a_constant_batch():
    r = Recipe(batch_schedule="constant", batch_start=4, batch_end=4, seq_len=10,
               warmup_fraction=0.25, decay="wsd", decay_fraction=0.5)
    s = scaling.step_counts(r, 400)  # 40 tokens a step -> 10 steps
    assert (s.total, s.samples) == (10, 40)
    assert (s.warmup, s.warmup_samples) == (3, 12)  # first step starting at >= 100 tokens
    assert s.decay_start == 5 and s.decay_samples == 20


def test_step_counts_follow_the_linear_ramp():
    r = Recipe(batch_schedule="linear", batch_start=2, batch_end=8, batch_ramp_fraction=0.5,
               seq_len=1)
    s = scaling.step_counts(r, 1000)
    assert s.samples >= 1000 and s.total < 1000 / 2  # most steps at the larger batch
    assert s.ramp_samples >= 500 and s.ramp_samples < 500 + 8


def _walk_one_step_at_a_time(r: Recipe, tokens: int) -> scaling.StepCounts:
    """The definition `step_counts` must match: every step's batch from the schedule."""
    from trainers.config.schedules import batch_size_at

    marks = {"warmup": r.warmup_fraction, "ramp": r.batch_ramp_fraction,
             "decay": 1 - r.decay_fraction if r.decay == "wsd" else r.warmup_fraction}
    seen = steps = 0
    at = {}
    while seen < tokens:
        at.update({n: (steps, seen // r.seq_len) for n, f in marks.items()
                   if n not in at and seen >= f * tokens})
        seen += batch_size_at(r, seen, tokens) * r.seq_len
        steps += 1
    end = (steps, seen // r.seq_len)
    get = {n: at.get(n, end) for n in marks}
    return scaling.StepCounts(
        total=steps, warmup=get["warmup"][0], ramp=get["ramp"][0],
        decay_start=get["decay"][0], samples=end[1], warmup_samples=get["warmup"][1],
        ramp_samples=get["ramp"][1], decay_samples=end[1] - get["decay"][1])


def test_step_counts_jumps_land_where_the_step_by_step_walk_does():
    """step_counts skips runs of equal batches (full runs have millions of steps): same counts
    as walking every step, for every schedule, marks and awkward sizes."""
    import random

    rng = random.Random(0)
    checked = 0
    while checked < 300:
        try:
            r = Recipe(batch_schedule=rng.choice(["constant", "linear", "step"]),
                       batch_start=rng.randint(1, 64), batch_end=rng.randint(1, 256),
                       batch_ramp_fraction=rng.choice([0.0, 0.1, rng.random()]),
                       seq_len=rng.choice([1, 7, 128]),
                       warmup_fraction=rng.choice([0.0, rng.random() / 2]),
                       decay=rng.choice(["cosine", "wsd", "multistep"]),
                       decay_fraction=rng.random())
        except ValueError:  # e.g. a linear ramp that shrinks
            continue
        tokens = rng.choice([1, 12_345, rng.randint(1, 2_000_000)])
        assert scaling.step_counts(r, tokens) == _walk_one_step_at_a_time(r, tokens), (r, tokens)
        checked += 1


def test_checkpoint_ratio_is_the_smallest_that_fits():
    a, hw = config("16B"), get_hardware("h100")
    plan = cm.ParallelPlan(ep=8, dp=8)
    kw = dict(seq_len=4096, micro_batch=4, precision="bf16")
    r = scaling.choose_checkpoint_ratio(a, plan, hw, **kw)
    assert r is not None and 0 < r <= 1
    fits = [cm.fits(cm.memory_per_gpu(a, plan, checkpoint_ratio=x, **kw), hw, 0.9)
            for x in scaling.checkpoint_grid(a, plan.pp)]
    assert fits.index(True) == scaling.checkpoint_grid(a, plan.pp).index(r)
    roomy = scaling.choose_checkpoint_ratio(a, plan, get_hardware("h200"), **kw)
    assert roomy is not None and roomy < r  # more memory, less recompute


def test_planner_returns_a_layout_that_fits_and_honours_fixed_degrees():
    a, hw = config("16B"), get_hardware("h800")
    kw = dict(seq_len=4096, micro_batch=1, precision="bf16")
    choice = scaling.plan_parallelism(a, 16, hw, **kw)
    assert choice is not None and choice.plan.world == 16
    mem = cm.memory_per_gpu(a, choice.plan, checkpoint_ratio=choice.checkpoint_ratio, **kw)
    assert mem.total <= 0.9 * hw.memory_bytes and math.isclose(mem.total_gib, choice.peak_gib)
    fixed = scaling.plan_parallelism(a, 16, hw, tp=2, pp=2, **kw)
    assert fixed is not None and (fixed.plan.tp, fixed.plan.pp) == (2, 2)


def test_nothing_fits_then_more_gpus_are_proposed():
    a, hw = config("671B"), get_hardware("h800")
    kw = dict(seq_len=4096, micro_batch=1, precision="bf16")
    assert scaling.plan_parallelism(a, 8, hw, **kw) is None  # 671B on one node: no
    proposal = scaling.propose_gpus(a, 64, hw, **kw)
    assert proposal is not None
    gpus, choice = proposal
    assert gpus > 64 and choice.plan.world == gpus
