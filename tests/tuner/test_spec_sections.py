"""Each spec section checks its own values wherever it is built (a parsed spec, a stored one, a
law's budget, a ladder's rung, a `dataclasses.replace` in code), naming the field; rules across
sections stay in the spec's parse."""

from __future__ import annotations

import dataclasses

import pytest

from tuner.study.specs.spec import (
    BudgetSection,
    DataSection,
    ModelSection,
    PruningSection,
    ResourcesSection,
    SpecError,
    StudySection,
    parse_spec,
)

GOOD = {
    StudySection: StudySection(name="ok"),
    ModelSection: ModelSection(preset="debug"),
    DataSection: DataSection(),
    BudgetSection: BudgetSection(),
    PruningSection: PruningSection(scheduler="asha"),
    ResourcesSection: ResourcesSection(),
}


@pytest.mark.parametrize(("section", "change", "field"), [
    (StudySection, {"name": "a/b"}, "study.name"),
    (StudySection, {"n_trials": 0}, "study.n_trials"),
    (StudySection, {"sampler": "grid"}, "study.sampler"),
    (ModelSection, {"full": "/x/config.json"}, "model"),  # both a preset and a config
    (ModelSection, {"preset": ""}, "model"),  # neither
    (ModelSection, {"preset": "no-such-preset"}, "model.preset"),
    (ModelSection, {"proxy": "debug"}, "model.proxy"),  # a proxy without a config
    (ModelSection, {"group_score": "mean"}, "model.group_score"),
    (DataSection, {"vocab_size": -1}, "data.vocab_size"),
    (DataSection, {"text_field": ""}, "data.text_field"),
    (BudgetSection, {"tokens_per_trial": 0}, "budget.tokens_per_trial"),
    (BudgetSection, {"eval_every_tokens": 300_000}, "budget.eval_every_tokens"),
    (BudgetSection, {"eval_every_tokens": 0}, "budget.eval_every_tokens"),
    (PruningSection, {"scheduler": "hyperband"}, "pruning.scheduler"),
    (PruningSection, {"grace_tokens": 0}, "pruning.grace_tokens"),
    (PruningSection, {"reduction_factor": 1.0}, "pruning.reduction_factor"),
])
def test_a_section_built_in_code_checks_itself(section, change, field):
    with pytest.raises(SpecError) as e:
        dataclasses.replace(GOOD[section], **change)
    assert e.value.field == field


def test_no_pruning_asks_nothing_of_its_grace_or_factor():
    assert PruningSection(scheduler="none", grace_tokens=0, reduction_factor=1.0)


def _table(**sections: dict) -> dict:
    table = {"study": {"name": "s"}, "space": {"params": {"lr": {
        "type": "float", "low": 1e-4, "high": 1e-2, "log": True}}}}
    return table | sections


def test_unset_intervals_follow_the_budget_and_the_grace_must_fit_it():
    spec = parse_spec(_table(budget={"tokens_per_trial": 1000}, pruning={"scheduler": "asha"}))
    assert spec.budget.eval_every_tokens == 250 and spec.pruning.grace_tokens == 250
    with pytest.raises(SpecError) as e:  # a rule across the two sections: the parse's
        parse_spec(_table(budget={"tokens_per_trial": 1000},
                          pruning={"scheduler": "asha", "grace_tokens": 2000}))
    assert e.value.field == "pruning.grace_tokens"


@pytest.mark.parametrize(("model", "field"), [
    ({"preset": 0}, "model.preset"),  # a wrong type is refused, not read as "no preset"
    ({"full": 3}, "model.full"),
])
def test_a_model_table_of_the_wrong_type_is_refused(model, field):
    with pytest.raises(SpecError) as e:
        parse_spec(_table(model=model))
    assert e.value.field == field
