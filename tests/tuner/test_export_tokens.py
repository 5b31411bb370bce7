"""Every exported launch config trains the requested tokens, warms up over the tuned share of
them, and describes the batch schedule the same way.

Each reader below counts what the consuming tool would do with the file: torchtitan runs
``steps`` steps of ``global_batch_size``; Megatron-LM turns ``--train-samples`` and
``--rampup-batch-size`` into iterations as ``update_train_iters`` does; the native JSON is
walked with its own recipe for ``schedule.total`` steps.
"""

from __future__ import annotations

import json
import math
import re
import tomllib

import pytest

from trainers.config.model_args import ModelArgs
from trainers.config.recipe import Recipe
from trainers.config.schedules import batch_size_at
from trainers.presets import PUBLISHED_CONFIGS
from tuner.export import formats
from tuner.modeling import scaling
from tuner.modeling.full_run import FullRunTarget, build_full_run, constant_batch_steps
from tuner.modeling.hardware import get_hardware

CONFIGS = PUBLISHED_CONFIGS
PROXY = ModelArgs(dim=64, n_layers=2, n_heads=4, inter_dim=128, moe_inter_dim=16,
                  vocab_size=256, n_routed_experts=8, n_activated_experts=2, kv_lora_rank=32,
                  qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16)
TOKENS = 10**11  # ~16k steps at B_opt: every reader runs in milliseconds
MODEL_ONLY = {"deepseek", "hf"}  # model configs: they say nothing about training length


def full_run(recipe: Recipe, tokens: int = TOKENS, **kw):
    target = FullRunTarget(**({"model_args": ModelArgs.from_json(CONFIGS / "config_671B.json"),
                               "name": "671B",
                               "hardware": get_hardware("h800"), "gpus": 2048,
                               "tokens": tokens, "seq_len": 4096, "tp": 1, "pp": 16,
                               "ep": 64} | kw))
    return build_full_run(recipe, PROXY, target, proxy_tokens=200_000,
                          proxy_info={"study": "s", "trial": 7, "values": {"val_loss": 2.0}})


def megatron_args(text: str) -> dict[str, str | None]:
    pairs = (line.partition(" ") for line in text.splitlines() if not line.startswith("#"))
    return {flag: value or None for flag, _, value in pairs}


def megatron_batches(a: dict[str, str | None]) -> list[tuple[int, int]]:
    """(first sample, batch) as Megatron-LM's StepBatchsizeNumMicroBatchesCalculator parses
    ``--step-batch-size-schedule`` (thresholds in tokens // seq_length), or the constant
    ``--global-batch-size``."""
    seq = int(a["--seq-length"])
    if a.get("--step-batch-size-schedule") is None:
        return [(0, int(a["--global-batch-size"]))]
    pairs = (e.split(":") for e in a["--step-batch-size-schedule"].replace(",", " ").split())
    return sorted((int(t) // seq, int(b)) for t, b in pairs)


def megatron_trained(text: str) -> tuple[int, int, int]:
    """(tokens, warmup tokens, largest batch in tokens) as Megatron-LM would train the file:
    ``update_train_iters`` walks the batch schedule over ``--train-samples``."""
    a = megatron_args(text)
    seq, train = int(a["--seq-length"]), int(a["--train-samples"])
    levels = megatron_batches(a)
    consumed = 0
    while consumed < train:
        consumed += [b for s, b in levels if consumed >= s][-1]
    return consumed * seq, int(a["--lr-warmup-samples"]) * seq, levels[-1][1] * seq


def torchtitan_trained(text: str) -> tuple[int, int, int]:
    t = tomllib.loads(text)["training"]
    step = t["global_batch_size"] * t["seq_len"]
    warmup = tomllib.loads(text)["lr_scheduler"]["warmup_steps"]
    return t["steps"] * step, warmup * step, step


def torchtitan_module_trained(text: str) -> tuple[int, int, int]:
    """The same from the config function's assignments (torchtitan >= 0.3)."""
    def value(key: str) -> int:
        return int(re.search(rf"{re.escape(key)}\s*=\s*(\d+)", text).group(1))

    # the batch in both schemas the function sets (0.3.0's sequences, main's tokens): one step
    step = value("t.global_batch_size") * value("t.seq_len")
    assert value("t.num_tokens_per_train_step") == step
    return value("config.training.steps") * step, value("warmup_steps") * step, step


def native_trained(text: str) -> tuple[int, int, int]:
    d = json.loads(text)
    recipe, budget = Recipe.from_dict(d["recipe"]), d["target"]["tokens"]
    seen = warmup = 0
    for step in range(d["schedule"]["total"]):
        if step == d["schedule"]["warmup"]:
            warmup = seen
        seen += batch_size_at(recipe, seen, budget) * recipe.seq_len
    return seen, warmup, recipe.batch_end * recipe.seq_len


READERS = {"native": native_trained, "megatron": megatron_trained,
           "torchtitan": torchtitan_module_trained, "torchtitan-toml": torchtitan_trained}
RECIPES = [Recipe(batch_schedule="constant", batch_start=32, warmup_fraction=0.143),
           Recipe(batch_schedule="linear", warmup_fraction=0.05, decay="wsd"),
           Recipe(batch_schedule="step", warmup_fraction=0.138, decay="cosine")]


def test_every_format_is_checked_or_holds_no_schedule():
    assert set(formats.FORMATS) == set(READERS) | MODEL_ONLY
    for name in MODEL_ONLY:
        text = formats.render(name, full_run(Recipe(batch_schedule="step")))
        assert not {"steps", "train_samples", "warmup_steps"} & set(json.loads(text))


@pytest.mark.parametrize("fmt", sorted(READERS))
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.batch_schedule)
def test_exported_file_trains_the_requested_tokens_and_warmup_share(fmt, recipe):
    run = full_run(recipe)
    tokens, warmup, step = READERS[fmt](formats.render(fmt, run))
    assert abs(tokens - TOKENS) <= step, (tokens, TOKENS)
    assert abs(warmup - run.recipe.warmup_fraction * TOKENS) <= step


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.batch_schedule)
def test_megatron_walks_the_same_steps_as_the_native_schedule(recipe):
    run = full_run(recipe)
    a = megatron_args(formats.render("megatron", run))
    levels, seen, steps = megatron_batches(a), 0, 0
    while seen < int(a["--train-samples"]):
        seen += [b for s, b in levels if seen >= s][-1]
        steps += 1
    assert steps == run.steps.total


def test_torchtitan_at_the_audited_size_trains_14_8t_tokens_not_32t():
    # the audit's case: a tuned step schedule, exported to a file whose batch is constant
    run = full_run(Recipe(batch_schedule="step", warmup_fraction=0.138), tokens=int(14.8e12),
                   tp=None, pp=None, ep=None)
    text = formats.render("torchtitan-toml", run)
    tokens, warmup, step = torchtitan_trained(text)
    assert abs(tokens - 14.8e12) <= step
    # the recipe's warmup sequences, at the final batch (within one step)
    assert 0 <= warmup - run.steps.warmup_samples * run.recipe.seq_len < step
    assert "steps (" in text and "counted at this batch" in text  # the NOTE says so


@pytest.mark.parametrize("tokens", [10**6, 999_937, 123_457])
@pytest.mark.parametrize("decay", ["cosine", "wsd"])
@pytest.mark.parametrize("schedule", ["constant", "step"])
def test_constant_batch_steps_by_hand(tokens, decay, schedule):
    """Counted at batch_end whatever the tuned schedule: the first step starting at or after a
    share of the tokens, 32 × 128 = 4096 tokens a step."""
    r = Recipe(batch_schedule=schedule, batch_start=8, batch_end=32, seq_len=128,
               warmup_fraction=0.137, decay=decay, decay_fraction=0.3, batch_ramp_fraction=0.1)
    def first_step_from(share: float) -> int:
        return math.ceil(share * tokens / 4096)

    total, warmup = first_step_from(1.0), first_step_from(0.137)
    decay_start = first_step_from(0.7) if decay == "wsd" else warmup
    assert constant_batch_steps(r, tokens) == scaling.StepCounts(
        total=total, warmup=warmup, ramp=0, decay_start=decay_start, samples=32 * total,
        warmup_samples=32 * warmup, ramp_samples=0, decay_samples=32 * (total - decay_start))


def _described(run) -> dict[str, str]:
    """The batch-schedule text and ramp length each format carries."""
    native = json.loads(formats.render("native", run))
    meg = megatron_args(formats.render("megatron", run))
    rules = {r["field"]: r["rule"] for r in native["rules"]}
    return {"native": native["schedule"]["batch"], "rule": rules["batch_ramp_fraction"],
            "megatron_ramp": str(megatron_batches(meg)[-1][0]),
            "native_ramp": str(native["schedule"]["ramp_samples"]),
            "torchtitan": formats.render("torchtitan-toml", run).split("\n[")[0],
            "torchtitan_module": formats.render("torchtitan", run).split("\nfrom ")[0]}


def test_step_schedule_is_described_at_30_and_70_percent_everywhere():
    run = full_run(Recipe(batch_schedule="step", batch_ramp_fraction=0.1))
    d = _described(run)
    assert "from 30%" in d["native"] and "from 70% of tokens" in d["native"]
    assert "10%" not in d["native"]
    assert d["native"] in d["rule"] and d["native"] in d["torchtitan"]
    assert d["native"] in d["torchtitan_module"]
    # Megatron's schedule switches at the exact sample, the native count at the next step
    assert 0 <= int(d["native_ramp"]) - int(d["megatron_ramp"]) <= run.recipe.batch_end
    assert int(d["native_ramp"]) * 4096 / TOKENS == pytest.approx(0.7, abs=1e-3)


def test_linear_ramp_is_described_with_its_tuned_length_everywhere():
    run = full_run(Recipe(batch_schedule="linear", batch_ramp_fraction=0.1))
    d = _described(run)
    assert "linear ramp" in d["native"] and "over the first 10% of tokens" in d["native"]
    assert d["native"] in d["rule"] and d["native"] in d["torchtitan"]
    # the ramp's last rounded level (batch_end) starts a little before the ramp's end
    assert 0.9 * int(d["native_ramp"]) <= int(d["megatron_ramp"]) <= int(d["native_ramp"])
    assert int(d["native_ramp"]) * 4096 / TOKENS == pytest.approx(0.1, abs=1e-3)


def test_constant_batch_has_no_ramp_anywhere():
    run = full_run(Recipe(batch_schedule="constant", batch_start=32))
    d = _described(run)
    assert d["native"].startswith("constant global batch")
    assert d["megatron_ramp"] == d["native_ramp"] == "0"
    assert "ramp" not in d["torchtitan"] and "ramp" not in d["torchtitan_module"]


@pytest.mark.parametrize("schedule", ["linear", "step"])
def test_every_exported_batch_splits_over_the_data_parallel_ranks(schedule):
    run = full_run(Recipe(batch_schedule=schedule, batch_start=8, batch_end=32,
                          batch_ramp_fraction=0.3))
    multiple = run.plan.dp * run.recipe.micro_batch
    sizes = {batch_size_at(run.recipe, t, TOKENS) for t in range(0, TOKENS, TOKENS // 1000)}
    assert len(sizes) > 2 and all(b % multiple == 0 for b in sizes), (multiple, sorted(sizes))
