from __future__ import annotations

import math
from pathlib import Path

import optuna
import pytest

from search_spaces import SpaceError, load_space, space_from_dict
from search_spaces.loader import SPACES_DIR
from trainers import Recipe

LR = {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}


def space(**params):
    return {"params": params}


BAD = [
    # (table, words the message must contain)
    ({"params": {"lr": LR}, "bogus": {}}, ["unknown key", "bogus", "fixed", "params"]),
    ({"params": {}}, ["params", "at least one"]),
    ({"fixed": {"lr": 1e-3}}, ["params", "at least one"]),
    (space(learning_rate=LR), ["learning_rate", "not a Recipe field", "lr"]),
    ({"params": {"lr": LR}, "fixed": {"nope": 1}}, ["nope", "not a Recipe field"]),
    ({"params": {"lr": LR}, "fixed": {"lr": 1e-3}}, ["fixed", "repeat", "lr"]),
    (space(lr={"type": "uniform", "low": 0.1, "high": 0.2}), ["lr.type", "float", "uniform"]),
    (space(lr={"low": 0.1, "high": 0.2}), ["lr.type", "None"]),
    (space(lr={**LR, "logg": True}), ["unknown key", "logg", "step"]),
    (space(lr={"type": "float", "high": 0.2}), ["lr.low", "required"]),
    (space(lr={"type": "float", "low": 0.1}), ["lr.high", "required"]),
    (space(lr={"type": "float", "low": "0.1", "high": 0.2}), ["lr.low", "number", "'0.1'"]),
    (space(lr={"type": "float", "low": math.nan, "high": 0.2}), ["lr.low", "finite", "nan"]),
    (space(lr={"type": "float", "low": 0.1, "high": math.inf}), ["lr.high", "finite", "inf"]),
    (space(lr={"type": "float", "low": 0.3, "high": 0.2}), ["low <= high", "low=0.3"]),
    (space(lr={"type": "float", "low": 0.0, "high": 0.2, "log": True}), ["lr.low", "> 0", "log"]),
    (space(lr={"type": "float", "low": 0.1, "high": 0.2, "log": "yes"}), ["lr.log", "true"]),
    (space(lr={**LR, "step": 0.01}), ["lr.step", "log"]),
    (space(lr={"type": "float", "low": 0.1, "high": 0.2, "step": 0}), ["lr.step", "> 0"]),
    (space(lr={"type": "float", "low": 0.1, "high": 0.2, "step": -0.1}), ["lr.step", "> 0"]),
    (space(batch_end={"type": "int", "low": 8.5, "high": 64}), ["batch_end.low", "integer"]),
    (space(batch_end={"type": "int", "low": 8, "high": 64, "step": 0.5}),
     ["batch_end.step", "> 0"]),
    (space(batch_end={"type": "int", "low": True, "high": 64}), ["batch_end.low", "integer"]),
    (space(decay={"type": "categorical", "choices": []}), ["decay.choices", "non-empty"]),
    (space(decay={"type": "categorical", "choices": "cosine"}), ["decay.choices", "list"]),
    (space(decay={"type": "categorical", "choices": ["cosine", "cosine"]}), ["repeat"]),
    (space(decay={"type": "categorical", "choices": [{"a": 1}]}), ["decay.choices", "strings"]),
    (space(decay={"type": "categorical", "choices": [1.0, math.nan]}), ["NaN or inf"]),
    (space(decay={"type": "categorical", "choices": ["cosine"], "low": 1}),
     ["unknown key", "low", "choices"]),
    (space(decay_fraction={"type": "float", "low": 0.1, "high": 0.2,
                           "when": {"decay": ["wsd"]}}), ["when", "declared before", "decay"]),
    (space(decay={"type": "categorical", "choices": ["cosine", "wsd"]},
           decay_fraction={"type": "float", "low": 0.1, "high": 0.2,
                           "when": {"decay": ["linear"]}}), ["when.decay", "can take", "linear"]),
    (space(decay={"type": "categorical", "choices": ["cosine", "wsd"]},
           decay_fraction={"type": "float", "low": 0.1, "high": 0.2,
                           "when": {"decay": "wsd"}}), ["when.decay", "list"]),
    (space(decay_fraction={"type": "float", "low": 0.1, "high": 0.2, "when": "decay == 'wsd'"}),
     ["when", "table"]),
    (space(decay_fraction={"type": "float", "low": 0.1, "high": 0.2,
                           "when": {"decay_fraction": [0.1]}}), ["itself"]),
    ({"params": {"lr": LR}, "fixed": {"warmup_fraction": 2.0}},
     ["fixed", "warmup_fraction", "[0, 1]"]),
    ({"params": {"lr": "1e-3"}}, ["params.lr", "table"]),
    # every value a param can take on its own must be one Recipe accepts
    (space(warmup_fraction={"type": "float", "low": 0.5, "high": 2.0}),
     ["warmup_fraction.high", "Recipe accepts", "[0, 1]", "2.0"]),
    (space(checkpoint_ratio={"type": "float", "low": 0.0, "high": 1.5}),
     ["checkpoint_ratio.high", "[0, 1]", "1.5"]),
    (space(decay={"type": "categorical", "choices": ["cosine", "linear"]}),
     ["decay.choices", "'wsd'", "'linear'"]),
    (space(lr={"type": "float", "low": 0.0, "high": 1e-2}), ["lr.low", "positive", "0.0"]),
    (space(batch_end={"type": "float", "low": 8, "high": 64}),
     ["batch_end.low", "positive integer", "8.0"]),
    (space(seq_len={"type": "categorical", "choices": [64, "128"]}),
     ["seq_len.choices", "positive integer", "'128'"]),
    (space(beta2={"type": "float", "low": 0.9, "high": 1.0}), ["beta2.high", "< 1", "1.0"]),
]


@pytest.mark.parametrize(("table", "words"), BAD, ids=[w[0] + str(i) for i, (_, w) in
                                                        enumerate(BAD)])
def test_bad_space_is_rejected_with_field_rule_and_value(table, words):
    with pytest.raises(SpaceError) as e:
        space_from_dict(table)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_a_value_recipe_refuses_is_named_once():
    with pytest.raises(SpaceError) as e:
        space_from_dict(space(precision={"type": "categorical", "choices": ["fp32", "fp16"]}))
    said = str(e.value)
    assert said.startswith("space.params.precision.choices: ") and said.count("but got") == 1
    assert "'fp16'" in said and ".)" not in said


def test_bad_file_errors(tmp_path: Path):
    with pytest.raises(SpaceError, match="must name an existing file.*deepseek_v3.toml"):
        load_space(tmp_path / "missing.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("[params.lr\ntype = 'float'")
    with pytest.raises(SpaceError, match="not valid TOML"):
        load_space(broken)


@pytest.mark.parametrize("name", sorted(p.name for p in SPACES_DIR.glob("*.toml")
                                        if "[study]" not in p.read_text()))  # not a full spec
def test_shipped_space_files_load_and_every_sample_is_a_valid_recipe(name):
    s = load_space(name)
    assert set(s.names()) <= set(Recipe.__dataclass_fields__)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(200):
        t = study.ask()
        s.to_recipe(s.suggest(t))  # raises if a combination breaks a Recipe rule
        study.tell(t, 0.0)


def test_deepseek_v3_space_covers_the_recipe_knobs_of_the_issue():
    names = set(load_space("deepseek_v3.toml").names())
    assert {"batch_schedule", "batch_start", "batch_end", "batch_ramp_fraction", "lr",
            "warmup_fraction", "decay", "min_lr_ratio", "checkpoint_ratio", "precision",
            "bias_update_speed"} <= names


def test_conditional_param_is_sampled_only_under_its_condition():
    s = space_from_dict({"params": {
        "decay": {"type": "categorical", "choices": ["cosine", "wsd"]},
        "decay_fraction": {"type": "float", "low": 0.1, "high": 0.3, "when": {"decay": ["wsd"]}},
    }, "fixed": {"lr": 5e-3}})
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    seen = set()
    for _ in range(40):
        t = study.ask()
        p = s.suggest(t)
        seen.add(p["decay"])
        assert ("decay_fraction" in p) == (p["decay"] == "wsd")
        r = s.to_recipe(p, seed=7)
        assert r.lr == 5e-3 and r.seed == 7
        if p["decay"] == "cosine":
            assert r.decay_fraction == Recipe().decay_fraction  # Recipe default applies
        study.tell(t, 0.0)
    assert seen == {"cosine", "wsd"}


def test_condition_on_a_fixed_value():
    s = space_from_dict({"params": {"decay_fraction": {
        "type": "float", "low": 0.1, "high": 0.3, "when": {"decay": ["wsd"]}},
        "lr": LR}, "fixed": {"decay": "cosine"}})
    study = optuna.create_study()
    assert s.suggest(study.ask()).keys() == {"lr"}


def test_distributions_follow_the_declaration():
    s = space_from_dict({"params": {
        "lr": LR, "batch_end": {"type": "int", "low": 16, "high": 64, "step": 8},
        "checkpoint_ratio": {"type": "float", "low": 0.0, "high": 1.0, "step": 0.25}}})
    d = s.distributions()
    assert d["lr"] == optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)
    assert d["batch_end"] == optuna.distributions.IntDistribution(16, 64, step=8)
    assert d["checkpoint_ratio"].step == 0.25


def test_ranges_recipe_accepts_pass_even_when_some_combinations_do_not():
    """Recipe's batch_start <= batch_end rule is about pairs; a pair is a failed trial, not a
    bad space, so each range is judged on its own."""
    s = space_from_dict(space(
        batch_schedule={"type": "categorical", "choices": ["constant", "linear", "step"]},
        batch_start={"type": "int", "low": 4, "high": 64},
        batch_end={"type": "int", "low": 16, "high": 32},
        warmup_fraction={"type": "float", "low": 0.0, "high": 0.99},
        checkpoint_ratio={"type": "float", "low": 0.0, "high": 1.0, "step": 0.25}))
    assert s.names()[0] == "batch_schedule"


@pytest.mark.filterwarnings("ignore:The distribution is specified by")
def test_a_stepped_range_is_checked_at_its_last_step():
    """Optuna never samples past the last step, so only that value must be valid."""
    s = space_from_dict(space(checkpoint_ratio={"type": "float", "low": 0.0, "high": 1.2,
                                                "step": 0.5}))
    assert s.distributions()["checkpoint_ratio"].high == 1.0


@pytest.mark.parametrize(("table", "want"), [
    ({"params": {"lr": LR}}, Recipe().seq_len),
    ({"params": {"lr": LR}, "fixed": {"seq_len": 32}}, 32),
    (space(seq_len={"type": "int", "low": 16, "high": 512, "step": 16}), 512),
    (space(seq_len={"type": "categorical", "choices": [256, 64]}), 256),
    (space(precision={"type": "categorical", "choices": ["fp32", "bf16"]},
           seq_len={"type": "int", "low": 16, "high": 64, "when": {"precision": ["fp32"]}}),
     Recipe().seq_len),
])
def test_largest_is_the_worst_case_a_trial_can_get(table, want):
    assert space_from_dict(table).largest("seq_len") == want


def test_relative_space_file_is_read_from_base_dir_only(tmp_path: Path, monkeypatch):
    (tmp_path / "spec_dir").mkdir()
    (tmp_path / "cwd").mkdir()
    (tmp_path / "cwd" / "mine.toml").write_text('[params.lr]\ntype = "float"\n'
                                                'low = 0.001\nhigh = 0.01\n')
    monkeypatch.chdir(tmp_path / "cwd")
    assert load_space("mine.toml").names() == ("lr",)  # no base_dir: the current folder
    with pytest.raises(SpaceError, match="spec_dir"):
        load_space("mine.toml", base_dir=tmp_path / "spec_dir")


def test_space_round_trips_through_its_dict():
    s = load_space("deepseek_v3.toml")
    assert space_from_dict(s.to_dict()) == s
