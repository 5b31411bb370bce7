"""The anchored answer: the prior chosen by leave-one-family-out, and the team's evidence moving
it by what it measured, no more (`tuner.modeling.anchor`)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from tuner.modeling.anchor.answer import answer_lr, combine, shipped_prior
from tuner.modeling.anchor.prior import RunPoint, fit_prior
from tuner.modeling.anchor.recipe_table import load_recipes
from tuner.modeling.laws.lr_at_batch import LrAtBatch

V3 = RunPoint.of(next(r for r in load_recipes() if r.name == "DeepSeek-V3"))


def reading(lr: float, width: float, *, tokens_past: float = 1.0) -> LrAtBatch:
    """A team law's reading at the full run: ``lr`` with a 95% band ``width`` (hi / lo) wide,
    a band that carries its own model-form error (as lr*(D, B)'s does)."""
    half = math.sqrt(width)
    return LrAtBatch(law="team", tokens=V3.tokens, batch=V3.batch, lr=lr, law_lr=lr,
                     band=(lr / half, lr * half), level=0.95, decades_tokens=tokens_past,
                     decades_batch=0.0, valid_at_batch=None, refusal="", rule="",
                     form_error=True)


def test_the_form_is_chosen_by_its_left_out_scatter_and_said() -> None:
    prior = shipped_prior()
    best = min(prior.lr_scores.values())
    assert prior.lr.scatter == best and prior.lr.form.key in prior.summary()
    assert prior.lr_scores["constant/active"] > best  # every form must beat one LR for all
    assert prior.lr.within <= prior.lr.scatter  # a lab the table knows is predicted better


def test_every_deepseek_run_is_predicted_within_2x_with_every_deepseek_row_out() -> None:
    table = load_recipes()
    prior = fit_prior([r for r in table if r.family != "deepseek"])
    for name in ("DeepSeek-V2-Lite", "DeepSeek-V2", "DeepSeek-V3"):
        run = next(r for r in table if r.name == name)
        got = prior.read_lr(RunPoint.of(run))
        assert 0.5 < got.value / run.lr < 2, (name, got.value, run.lr)
        assert got.band[0] < run.lr < got.band[1]


def test_a_far_law_barely_moves_the_prior_and_a_near_narrow_one_dominates() -> None:
    prior = shipped_prior()
    p = prior.read_lr(V3)
    far = answer_lr(V3, prior=prior, law=reading(p.value * 1.5, 300.0, tokens_past=7))
    assert far.law_weight < 0.1 and far.lr == pytest.approx(p.value, rel=0.05)
    near = answer_lr(V3, prior=prior, law=reading(p.value * 1.5, 1.6))
    assert near.law_weight > 0.8 and near.width < p.band[1] / p.band[0]
    assert near.lr == pytest.approx(p.value * 1.5, rel=0.1) and not near.disagree


def test_a_team_law_a_decade_from_the_target_that_disagrees_is_followed_within_its_band():
    """The team measured its own optimum one decade below the target, narrowly, 6x above what
    published practice gives: the two disagree beyond their bands; the answer follows the
    team's law inside the law's band, says so with both numbers and what can settle it, and
    its band holds the law's whole band and reaches down to the prior's value (one of the two
    is wrong; nothing measured says which), no further."""
    prior = shipped_prior()
    p = prior.read_lr(V3)
    law = reading(p.value * 6, 1.8)
    ans = answer_lr(V3, prior=prior, law=law)
    assert law.band[0] <= ans.lr <= law.band[1]
    assert ans.lr == pytest.approx(law.lr)
    assert ans.band[0] == pytest.approx(p.value) and ans.band[1] == pytest.approx(law.band[1])
    assert "DISAGREE" in ans.disagree and f"{law.lr:.3g}" in ans.disagree \
        and f"{p.value:.3g}" in ans.disagree and "--reference" in ans.disagree
    # the other way round: a narrow prior, a wide law far above it: the prior's value with its
    # own band, whose coverage the recipe table measures; the disagreement said
    wide = reading(p.value * 1000, 20.0)
    other = answer_lr(V3, prior=prior, law=wide)
    assert other.lr == pytest.approx(p.value) and other.band == pytest.approx(p.band)
    assert "the answer is the narrower, the prior, with its own band" in other.disagree


def test_a_law_that_refuses_at_this_batch_does_not_move_the_answer() -> None:
    prior = shipped_prior()
    refused = dataclasses.replace(reading(1e-2, 1.5), lr=None,
                                  refusal="the study fitted its lr law at one batch")
    ans = answer_lr(V3, prior=prior, law=refused)
    assert ans.lr == pytest.approx(prior.read_lr(V3).value) and not ans.law_used
    assert "does not move it: the study fitted its lr law at one batch" in ans.rule()


def test_under_mup_the_law_enters_as_the_hidden_lr_and_the_answer_is_a_base_lr() -> None:
    prior = shipped_prior()
    p = prior.read_lr(V3)
    base = reading(p.value * 112, 1.6)  # its hidden matrices: the prior's value
    ans = answer_lr(V3, prior=prior, law=base, width_mult=112.0)
    assert ans.hidden_lr == pytest.approx(p.value, rel=1e-6)
    assert ans.lr == pytest.approx(p.value * 112, rel=1e-6) and not ans.disagree


@pytest.mark.parametrize("shift", [0.0, 0.3, 1.0])
def test_the_combined_band_covers_unkind_truths_as_often_as_it_claims(shift: float) -> None:
    """Calibration on synthetic truths: the team's law reads the truth with a skewed error (a
    log-normal plus a one-sided bias of a third of its sd), the prior reads it off by its own
    scatter; where they agree the combination covers ~95%, and where they disagree the
    narrower alone still covers at least what its own band claims, less the bias."""
    rng = np.random.default_rng(0)
    prior = shipped_prior()
    p = prior.read_lr(V3)
    p_sd = math.log10(p.band[1] / p.band[0]) / (2 * 1.96)
    inside = 0
    n = 400
    for _ in range(n):
        truth = math.log10(p.value) + rng.normal(0, p_sd) + shift * p_sd
        law_sd = rng.uniform(0.05, 0.6)
        seen = truth + rng.normal(0, law_sd) + law_sd / 3 * abs(rng.normal())
        law = reading(10**seen, 10 ** (2 * 1.96 * law_sd))
        moved = dataclasses.replace(prior, team_shift=-shift * p_sd)  # prior off by `shift` sd
        ans = answer_lr(V3, prior=moved, law=law)
        inside += ans.band[0] <= 10**truth <= ans.band[1]
    assert inside / n >= 0.85, inside / n


def test_a_law_whose_band_carries_no_bend_weighs_less_the_further_it_reaches() -> None:
    """A narrow band far from its data, which does not carry that the law may bend (a power law
    through budgets), gets 0.15 decades of sd per decade of reach: seven decades out it cannot
    outweigh published practice, one decade out it still moves it."""
    prior = shipped_prior()
    p = prior.read_lr(V3)
    far = dataclasses.replace(reading(p.value * 30, 1.5, tokens_past=7), form_error=False)
    assert answer_lr(V3, prior=prior, law=far).law_weight < 0.1
    near = dataclasses.replace(reading(p.value * 1.2, 1.5, tokens_past=0.5), form_error=False)
    assert answer_lr(V3, prior=prior, law=near).law_weight > 0.5


def test_combine_weighs_by_inverse_variance_where_the_two_agree() -> None:
    c = combine(0.0, 0.2, 0.1, 0.1)
    assert c.weight == pytest.approx(0.8) and c.mu == pytest.approx(0.08)
    assert c.sd == pytest.approx(math.sqrt(1 / (25 + 100))) and not c.disagree
    assert (c.lo, c.hi) == pytest.approx((c.mu - 1.959964 * c.sd, c.mu + 1.959964 * c.sd))
    far = combine(0.0, 0.2, 1.0, 0.1)
    assert far.disagree and far.mu == 1.0 and far.sd == 0.1 and far.weight == 1.0
    # the team's narrower band, reaching the prior's value on its side
    assert far.lo == pytest.approx(0.0) and far.hi == pytest.approx(1.0 + 1.959964 * 0.1)
    # the prior narrower: its own band
    kept = combine(0.0, 0.1, 1.0, 0.2)
    assert kept.disagree and kept.weight == 0.0 and kept.mu == 0.0
    assert (kept.lo, kept.hi) == pytest.approx((-1.959964 * 0.1, 1.959964 * 0.1))


def test_the_table_backtest_meets_its_targets_and_the_command_prints_it(capsys) -> None:
    """Each recipe predicted without it (its family placing the lab) and without its family
    (a new lab), the form chosen afresh each time; the command prints the table and both
    summaries."""
    from tuner.app.cli import main
    from tuner.modeling.anchor.backtest import summary, table_backtest

    rows = table_backtest(load_recipes())
    one = summary(rows, "recipe_out")
    assert one["n"] == 20 and one["median_miss"] <= 1.4 and one["coverage"] >= 0.9
    assert one["median_width"] <= 4
    fam = summary(rows, "family_out")
    assert fam["median_miss"] <= 1.45 and fam["coverage"] >= 0.8
    assert main(["law", "backtest"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("prior: LR: ") and "| DeepSeek-V3 (deepseek) | 0.00022 |" in out
    assert "left out: Kimi-K2: muonclip" in out and "- its whole family out (a new lab)" in out
