"""The law's progress lines: the whole law's tokens, which budget of how many, the share
trained, the next budget's size and an ETA from a measured rate."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.study.specs.spec import load_spec
from tuner.study.workflows.law_progress import LawClock, budget_line, law_work, plan_line

LAW_TOML = Path(__file__).parents[2] / "search_spaces" / "law.toml"


@pytest.fixture
def law():
    return load_spec(LAW_TOML)


def test_work_counts_trials_noise_and_the_predicted_first_trial(law) -> None:
    work = law_work(law)
    # the held-out budget, then the held-out batch at the held-out budget's tokens
    assert [w.tokens for w in work] == [16_384, 49_152, 147_456, 524_288, 2_621_440, 2_621_440]
    assert [w.trials for w in work] == [24, 24, 24, 24, 25, 25]  # held out: the predicted one
    assert {w.noise_runs for w in work} == {law.study.noise_top * law.study.noise_repeats}
    assert work[1].total == 49_152 * (24 + work[1].noise_runs)


def test_plan_line_says_the_whole_law_and_the_held_out_share(law) -> None:
    work = law_work(law)
    total = sum(w.total for w in work)
    line = plan_line(law)
    assert line.startswith("law: 6 budgets, 146 trials and 24 noise re-trainings")
    assert f"{total / 1e6:.1f}M tokens in all" in line
    assert f"the held-out budget is {work[4].total / total:.0%} of them" in line


def test_budget_line_counts_budgets_from_one_and_names_the_next_budget(law) -> None:
    work = law_work(law)
    line = budget_line(law, 2, done_here=12)
    assert line.startswith("law: budget 3/6 (147,456 tokens per trial), 12/24 trials, "
                           "then 4 noise re-trainings")
    assert f"the next budget trains {work[3].total / work[2].total:.1f}x" in line
    assert "left" not in line  # no rate measured yet: no ETA
    last = budget_line(law, 5)
    assert "next budget" not in last and "0/25 trials" in last


def test_budget_line_eta_is_the_tokens_left_at_this_runs_pooled_rate(law) -> None:
    work = law_work(law)
    left = sum(w.total for w in work[3:])
    clock = LawClock(spec=law)
    clock.record(2, work[2].total / (left / (90 * 60)))  # 90 minutes' worth of tokens left
    assert "about 1 h 30 min left" in budget_line(law, 3, clock=clock)
    assert "1 budget timed; small budgets run slowest per token" in budget_line(law, 3,
                                                                                 clock=clock)


def test_the_eta_pools_every_budget_timed_and_gives_the_fastest_and_slowest(law) -> None:
    """One slow budget (a busy machine) does not set the ETA alone: the rate is all the timed
    budgets' tokens over all their seconds, and the range is their fastest and slowest."""
    work = law_work(law)
    left = sum(w.total for w in work[3:])
    clock = LawClock(spec=law)
    fast = left / (60 * 60)  # tokens/s that leave 1 h
    clock.record(1, work[1].total / fast)
    clock.record(2, work[2].total / (fast / 4))  # the last budget 4x slower
    pooled = (work[1].total + work[2].total) / sum(clock.seconds.values())
    line = budget_line(law, 3, clock=clock)
    assert f"at this run's {pooled:,.0f} tokens/s" in line
    assert "(1 h 00 min to 4 h 00 min at its fastest and slowest of 2 budgets timed)" in line
    assert clock.rates() == pytest.approx((fast / 4, fast))
