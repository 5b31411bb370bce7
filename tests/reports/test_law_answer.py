"""law.md's full-run answer is the export's (`tuner.export.answers.law_full_run`): the published
recipes' prior at the batch the export writes, moved by the team's law read there. An answer
whose band is wider than the export accepts is said not to be pinned (the export's refusal
named); the team's law is shown alone beside it with its weight; law.png does not draw a band
of many decades that would flatten every fitted optimum beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reports.laws.law import _answer, answer_line, law_figure, pinned
from tuner.modeling.full_run import LAW_BAND_LIMIT

RULE = ("anchored answer at 46,137,344 tokens per step: the published recipes' prior "
        "(compute_batch/active ...) gives 0.000196 [9.86e-05, 0.000391]")


def _data(band: list[float], *, law_band: list[float] | None = None, disagree: str = "",
          lr: float = 2.2e-2) -> dict[str, Any]:
    full = {"target": "deepseek-v3-671b", "tokens": 1.48e13, "x": 1.48e13,
            "lr_at_batch": 4.6137344e7, "lr_batch_rule": "the published recipes' prior gives "
            "4.6e7 tokens", "lr": lr, "lr_band": band, "decades_past": 6.8,
            "decades_past_batch": 4.2, "lr_in_d": 5e-6, "width_mult": 112.0, "compute": 3.6e24,
            "deepseek_llm_lr": 2.65e-4, "deepseek_llm_batch": 3.15e7,
            "answer": {"law_weight": 0.03, "disagree": disagree}, "answer_rule": RULE,
            "law_lr": 5.6e-4, "law_band": law_band or [1.2e-19, 6.8e4], "law_refusal": ""}
    opt = {"lr": 0.003, "lr_interval": [0.002, 0.004], "batch": 128.0,
           "batch_interval": [128.0, 300.0], "batch_placed": False}
    budgets = [{"tokens": t, "compute": t * 1e6, "held_out": False, "held_out_batch": False,
                "optimum": opt, "best": None} for t in (16_384.0, 524_288.0)]
    return {"name": "law", "full_run": full, "mup": True, "variable": "tokens",
            "budgets": budgets, "lr_law": {"coef": 0.3, "exponent": -0.36}, "batch_law": None}


def test_an_answer_the_export_refuses_is_not_pinned() -> None:
    data = _data([1e-3, 9e-2])  # 90x
    assert not pinned(data["full_run"])
    answer = "\n".join(_answer(data))
    assert "4.61e+07" not in answer and "46,137,344 tokens per step): **the LR is not pinned**" \
        in answer
    assert f"90x wide (more than {LAW_BAND_LIMIT:g}x)" in answer
    assert "`moetune export` refuses it" in answer and "--lr-wide-band" in answer


def test_a_band_within_the_limit_gives_the_answer_with_its_sources() -> None:
    data = _data([1.6e-2, 5.2e-2])  # 3.25x: the export writes it
    assert pinned(data["full_run"])
    answer = "\n".join(_answer(data))
    assert "not pinned" not in answer
    assert "**lr 0.022** (95% band 0.016–0.052, 3.25x), what `moetune export` of this law " \
        "writes." in answer
    assert f"How: {RULE}" in answer  # the prior, its form and scatter, the law's weight
    # the team's law alone, with its own band and distance, and its weight in the answer
    assert "The team's law alone there: lr 0.00056 (band 1.2e-19–6.8e+04" in answer
    assert "6.8 decades past the fitted budgets in D and 4.2 in B; its weight in the answer: " \
        "3%." in answer
    assert "lr / width_mult = 0.000196" in answer  # the hidden matrices' LR, beside a published


@pytest.mark.parametrize("band", [[1.2e-19, 6.8e4], [1.6e-4, 5.2e-4]])
def test_law_png_keeps_the_fitted_optima_readable(tmp_path: Path, band: list[float],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A drawn band of 24 decades set the lr axis to 24 decades (seed 3 of the CPU grid); not
    drawn, the axis spans the optima, the law and the full run's point."""
    from matplotlib.figure import Figure

    seen: list[tuple[float, float]] = []
    save = Figure.savefig

    def record(fig: Figure, *args: Any, **kwargs: Any) -> None:
        seen.append(fig.axes[0].get_ylim())
        save(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    law_figure(_data(band, lr=2.9e-4), tmp_path / "law.png")
    assert (tmp_path / "law.png").stat().st_size > 0
    (lo, hi), = seen
    assert hi / lo < 1e4, (lo, hi)


def test_the_terminal_gets_the_answer_in_one_line() -> None:
    """At the end of a law's run or report: the full run's lr and band, or that it is not
    pinned; the law's weight and any disagreement; the held-out check, per batch on a grid (a
    flat-bowl cell not judged)."""
    data = _data([1e-3, 9e-2]) | {"held_out_check": {
        "lr_ratio": 0.58, "lr_inside": True, "cells": [
            {"batch": 128.0, "lr_ratio": 2.04, "lr_inside": True},
            {"batch": 512.0, "lr_ratio": 2.24, "lr_inside": True},
            {"batch": 2048.0, "lr_ratio": 0.09, "lr_inside": True, "at_edge": True}]}}
    line = answer_line(data)
    assert line.startswith("law law: full run (deepseek-v3-671b, 1.48e+13 tokens, 4.614e+07 "
                           "tokens per step): the LR is not pinned (lr 0.022, band 90x wide; "
                           "the export refuses it), the published recipes' prior moved by the "
                           "team's law at weight 3% (6.8 decades past")
    assert line.endswith("held-out budget: lr*(D, B) predicted / measured 2.04, 2.24 at 128, "
                         "512 tokens per step, each inside its band (law.md).")
    one = _data([1.6e-2, 5.2e-2], disagree="THE TEAM'S LAW AND THE PRIOR DISAGREE ...") | {
        "held_out_check": {"lr_ratio": 1.3, "lr_inside": False}}
    line = answer_line(one)
    assert "tokens per step): lr 0.022, band 0.016-0.052, the published recipes' prior" in line
    assert "; THE LAW AND THE PRIOR DISAGREE;" in line
    assert "predicted / measured lr 1.30, OUTSIDE its band" in line and "\n" not in line
    assert answer_line({"name": "law"}).startswith("law law: no full-run answer yet")
