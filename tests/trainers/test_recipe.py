from __future__ import annotations

import pytest

from trainers import Recipe
from trainers.config.schedules import batch_size_at, lr_at

BUDGET = 1_000_000


@pytest.mark.parametrize(("field", "value", "rule"), [
    ("batch_schedule", "cubic", "one of"),
    ("batch_start", 0, "positive integer"),
    ("batch_start", 64, "<= batch_end"),
    ("seq_len", 1.5, "positive integer"),
    ("lr", -1e-3, "finite positive"),
    ("lr", float("inf"), "finite positive"),
    ("warmup_fraction", 1.5, r"in \[0, 1\]"),
    ("checkpoint_ratio", -0.1, r"in \[0, 1\]"),
    ("precision", "fp16", "one of"),
    ("decay", "linear", "one of"),
    ("spike_policy", "ignore", "one of"),
    ("spike_factor", 1.0, "> 1"),
    ("beta2", 1.0, "< 1"),
    ("weight_decay", -0.1, ">= 0"),
    ("batch_multiple", 0, "positive integer"),
    ("batch_end", 36, "multiple of batch_multiple=8"),
])
def test_bad_recipe_names_field_rule_value(field, value, rule):
    extra = {"batch_multiple": 8} if field == "batch_end" else {}
    with pytest.raises(ValueError, match=rf"Recipe\.{field}: .*{rule}.*{field}="):
        Recipe(**{field: value}, **extra)


def test_unknown_recipe_key_lists_valid_ones():
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['learning_rate'\].*'lr'"):
        Recipe.from_dict({"learning_rate": 1e-3})


def test_roundtrip_dict():
    r = Recipe(lr=1e-3, precision="fp8")
    assert Recipe.from_dict(r.to_dict()) == r


def test_constant_batch():
    r = Recipe(batch_schedule="constant", batch_start=4, batch_end=32)
    assert {batch_size_at(r, t, BUDGET) for t in range(0, BUDGET, 50_000)} == {32}


def test_linear_batch_ramp():
    r = Recipe(batch_schedule="linear", batch_start=8, batch_end=32, batch_ramp_fraction=0.2)
    assert batch_size_at(r, 0, BUDGET) == 8
    assert batch_size_at(r, 100_000, BUDGET) == 20  # halfway through the ramp
    assert batch_size_at(r, 200_000, BUDGET) == 32
    sizes = [batch_size_at(r, t, BUDGET) for t in range(0, BUDGET, 10_000)]
    assert sizes == sorted(sizes)


def test_step_batch_is_x1_x2_x4_at_30_and_70_percent():
    r = Recipe(batch_schedule="step", batch_start=8, batch_end=32)
    assert batch_size_at(r, 299_999, BUDGET) == 8
    assert batch_size_at(r, 300_000, BUDGET) == 16
    assert batch_size_at(r, 699_999, BUDGET) == 16
    assert batch_size_at(r, 700_000, BUDGET) == 32


def test_warmup_is_linear_to_peak():
    r = Recipe(lr=1e-3, warmup_fraction=0.1, decay="cosine")
    assert lr_at(r, 0, BUDGET) < 1e-7
    assert lr_at(r, 50_000, BUDGET) == pytest.approx(5e-4, rel=1e-3)
    assert lr_at(r, 100_000, BUDGET) == pytest.approx(1e-3)


def test_cosine_decays_to_min_ratio():
    r = Recipe(lr=1e-3, warmup_fraction=0.0, decay="cosine", min_lr_ratio=0.1)
    assert lr_at(r, 500_000, BUDGET) == pytest.approx(1e-4 + 0.9e-3 * 0.5)
    assert lr_at(r, BUDGET, BUDGET) == pytest.approx(1e-4)


def test_wsd_is_flat_then_linear_decay():
    r = Recipe(lr=1e-3, warmup_fraction=0.0, decay="wsd", decay_fraction=0.2, min_lr_ratio=0.0)
    assert lr_at(r, 799_999, BUDGET) == pytest.approx(1e-3)
    assert lr_at(r, 900_000, BUDGET) == pytest.approx(5e-4)
    assert lr_at(r, BUDGET, BUDGET) == pytest.approx(0.0, abs=1e-12)


def test_multistep_matches_deepseek_llm():
    r = Recipe(lr=1e-3, warmup_fraction=0.0, decay="multistep")
    assert lr_at(r, 799_999, BUDGET) == pytest.approx(1e-3)
    assert lr_at(r, 800_000, BUDGET) == pytest.approx(3.16e-4)
    assert lr_at(r, 900_000, BUDGET) == pytest.approx(1e-4)


@pytest.mark.parametrize("schedule", ["linear", "step"])
def test_batches_between_start_and_end_are_whole_multiples(schedule):
    """A full run's batches must split over its data-parallel ranks: with batch_multiple the
    ramp's and the step's in-between batches are multiples of it, and still monotonic."""
    r = Recipe(batch_schedule=schedule, batch_start=256, batch_end=7680, batch_multiple=256,
               batch_ramp_fraction=0.5)
    sizes = [batch_size_at(r, t, BUDGET) for t in range(0, BUDGET, 1_000)]
    assert all(b % 256 == 0 for b in sizes) and sizes == sorted(sizes)
    assert len(set(sizes)) > 2  # it still ramps: not just start and end
    unrounded = [batch_size_at(Recipe(**{**r.to_dict(), "batch_multiple": 1}), t, BUDGET)
                 for t in range(0, BUDGET, 1_000)]
    assert any(b % 256 for b in unrounded)  # without it they are not multiples
