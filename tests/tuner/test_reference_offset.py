"""The team's configuration against a reference one, side by side at proxy scale
(`tuner.modeling.anchor.offset`): an offset that holds on the largest budget moves the prior; one
that drifts with the budget is said and not applied. End to end, two law studies written through
the storage API (no Ray) and `moetune export --reference`."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from law_pair import TOKENS, reference, write_law

from tuner.app.cli import main
from tuner.modeling.anchor.answer import answer_lr, shipped_prior
from tuner.modeling.anchor.offset import OffsetError, measure_offset
from tuner.modeling.anchor.prior import RunPoint
from tuner.modeling.anchor.recipe_table import load_recipes
from tuner.modeling.laws.lr_batch_law import Cell
from tuner.study.store import database as db

BATCHES = (128.0, 512.0, 2048.0)
V3 = RunPoint.of(next(r for r in load_recipes() if r.name == "DeepSeek-V3"))


def cells(lr_star, *, se: float = 0.03, seed: int = 0) -> list[Cell]:
    rng = np.random.default_rng(seed)
    return [Cell(tokens=t, batch=b, lr=lr_star(t, b) * 10 ** rng.normal(0, se), se=se,
                 loss=2.0) for t in TOKENS for b in BATCHES]


def test_a_constant_offset_holds_on_the_largest_budget_and_is_applied() -> None:
    off = measure_offset(cells(lambda t, b: 2 * reference(t, b), seed=1),
                         cells(reference, seed=2))
    assert off.applied and not off.reason and off.cells == 12
    assert off.decades == pytest.approx(math.log10(2), abs=0.03) and off.sd < 0.05
    assert off.held_tokens == TOKENS[-1] and len(off.held) == 3


def test_an_offset_that_drifts_with_the_budget_is_said_and_not_applied() -> None:
    drift = measure_offset(cells(lambda t, b: reference(t, b) * (t / 1e4) ** 0.3, seed=1),
                           cells(reference, seed=2))
    assert not drift.applied and "the offset moves with the budget" in drift.reason
    assert "NOT applied" in drift.said()


def test_too_few_paired_budgets_is_an_error_naming_what_is_missing() -> None:
    one = [c for c in cells(reference) if c.tokens == TOKENS[0]]
    with pytest.raises(OffsetError, match="at 2 or more budgets"):
        measure_offset(one, one)


def test_an_applied_offset_moves_the_prior_placed_at_the_reference_family() -> None:
    off = measure_offset(cells(lambda t, b: 2 * reference(t, b), seed=1),
                         cells(reference, seed=2))
    placed = shipped_prior(None, "deepseek")
    alone = answer_lr(V3, prior=shipped_prior())
    moved = answer_lr(V3, prior=placed, offset=off)
    base = placed.read_lr(V3, placed=True)
    assert moved.lr == pytest.approx(base.value * 10**off.decades, rel=1e-6)
    assert moved.width < alone.width  # the lab placed: no between-lab scatter left to carry
    assert "measured offset" in moved.rule() and "held on the largest budget" in moved.rule()
    drift = measure_offset(cells(lambda t, b: reference(t, b) * (t / 1e4) ** 0.3, seed=1),
                           cells(reference, seed=2))
    kept = answer_lr(V3, prior=shipped_prior(), offset=drift)
    assert kept.lr == pytest.approx(alone.lr) and "NOT applied" in kept.rule()


def test_export_with_a_reference_law_applies_the_measured_offset(tmp_path, capsys) -> None:
    root = tmp_path / "runs"
    (root / "team").mkdir(parents=True)
    store = db.open_storage(db.storage_url(root / "team"))
    write_law(store, "team", 2.0)
    write_law(store, "ref", 1.0)
    out = tmp_path / "full.json"
    argv = ["export", "team", "--root", str(root), "--target", "deepseek-v3-671b", "--gpus",
            "2048", "--tokens", "14.8e12", "--out", str(out), "--reference", "ref"]
    assert main(argv) == 0, capsys.readouterr().err
    answer = json.loads(out.read_text())["lr"]["answer"]
    off = answer["offset"]
    assert off["applied"] and off["cells"] == 12
    assert off["factor"] == pytest.approx(2.0, rel=0.1)
    rule = next(r["rule"] for r in json.loads(out.read_text())["rules"] if r["field"] == "lr")
    assert "measured offset against the reference configuration" in rule
    bad = main([*argv[:-1], "nosuch"])
    assert bad == 2 and "--reference: no study 'nosuch'" in capsys.readouterr().err
