"""What a metric depends on (`Metric.depends_on`) matches what computes it: the timing's key reads
the systems knobs only, the full run's modeled cost the precision only."""

from __future__ import annotations

import dataclasses

import pytest

from trainers.config.recipe import Recipe
from trainers.presets import preset
from tuner.modeling.full_run import modeled_cost, target_of
from tuner.study.specs import metrics
from tuner.study.specs.metrics import SYSTEMS_FIELDS
from tuner.study.trial.timing import what_key

BASE = Recipe(batch_schedule="linear", batch_start=8, batch_end=32, seq_len=128, lr=2e-3)
BUDGET = 200_000
# one other valid value per recipe field
OTHER = {"batch_schedule": "step", "batch_start": 4, "batch_end": 16, "batch_ramp_fraction": 0.3,
         "seq_len": 64, "micro_batch": 4, "batch_multiple": 2, "lr": 5e-3,
         "warmup_fraction": 0.2, "decay": "wsd", "decay_fraction": 0.4, "min_lr_ratio": 0.3,
         "beta1": 0.8, "beta2": 0.99, "weight_decay": 0.0, "grad_clip": 0.5,
         "bias_update_speed": 1e-2, "balance_loss_alpha": 0.0, "mtp_lambda": 0.1,
         "checkpoint_ratio": 0.5, "precision": "fp32", "spike_policy": "skip",
         "spike_factor": 3.0, "seed": 7}


def test_every_recipe_field_has_another_value_here():
    assert set(OTHER) == {f.name for f in dataclasses.fields(Recipe)}


@pytest.mark.parametrize("field", sorted(OTHER))
def test_the_timing_key_reads_exactly_the_systems_fields(field):
    args = preset("debug")
    changed = dataclasses.replace(BASE, **{field: OTHER[field]})
    moved = what_key(args, changed, BUDGET) != what_key(args, BASE, BUDGET)
    assert moved == (field in SYSTEMS_FIELDS)


@pytest.mark.parametrize("field", sorted(OTHER))
def test_the_modeled_full_run_cost_reads_the_precision_only(field):
    args = preset("debug")
    target = target_of("deepseek-v3-16b", "h800", 64, 10**12, 4096)
    changed = dataclasses.replace(BASE, **{field: OTHER[field]})
    moved = modeled_cost(changed, args, target, BUDGET) != modeled_cost(BASE, args, target,
                                                                          BUDGET)
    assert moved == (field in metrics.FULL_RUN_COST_FIELDS)


def test_depends_on_answers_by_the_declaration():
    assert not metrics.depends_on("timed_tokens_per_s", "lr")
    assert metrics.depends_on("timed_tokens_per_s", "batch_end")
    assert not metrics.depends_on("full_gpu_hours", "batch_end")
    assert metrics.depends_on("val_loss", "lr") and metrics.depends_on("no_such_metric", "lr")
