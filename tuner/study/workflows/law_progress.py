"""The law's progress across its budgets: the plan line `law_stages` prints before the first
budget, and the line it prints as each budget starts (which budget of how many, its trials and
noise re-trainings, the share of the law's tokens already trained, how much larger the next
budget is, and an ETA for the whole law once a budget has run start to end in this process).

A law's budgets differ in size by 3-5x each and its held-out budget is most of its tokens, so a
per-budget bar's ETA says little about the whole; these lines say it in tokens, which is what
the trainings' time follows (the batch is the same at every budget of a law at one batch).
"""

from __future__ import annotations

from dataclasses import dataclass

from tuner.study.specs.spec import StudySpec


@dataclass(frozen=True, kw_only=True)
class BudgetWork:
    """What budget ``index`` of a law trains: its trials and noise re-trainings."""

    index: int
    tokens: int  # per trial
    trials: int
    noise_runs: int

    @property
    def total(self) -> int:
        """Tokens trained by the budget's trials and noise re-trainings together."""
        return self.tokens * (self.trials + self.noise_runs)


def law_work(spec: StudySpec) -> list[BudgetWork]:
    """Every budget's work, in the order they run (the held-out budget and the held-out batch
    also run their predicted recipe as a first trial; noise: the ``noise_top`` best trials x
    ``noise_repeats`` seeds)."""
    law, s = spec.law, spec.study
    n = law.trials or s.n_trials
    noise = s.noise_top * s.noise_repeats
    predicted = {len(law.tokens)} if law.held_out else set()
    if law.held_out_batch:  # its predicted recipe first too
        predicted.add(len(law.budgets) - 1)
    return [BudgetWork(index=i, tokens=t, noise_runs=noise,
                       trials=n + (1 if i in predicted else 0))
            for i, t in enumerate(law.budgets)]


def plan_line(spec: StudySpec) -> str:
    """What the whole law trains, said once before its first budget."""
    work = law_work(spec)
    total = sum(w.total for w in work)
    trials = sum(w.trials for w in work)
    noise = sum(w.noise_runs for w in work)
    line = (f"{spec.name}: {len(work)} budgets, {trials} trials"
            + (f" and {noise} noise re-trainings" if noise else "")
            + f", {_tokens(total)} tokens in all")
    if spec.law.held_out:
        line += f"; the held-out budget is {work[len(spec.law.tokens)].total / total:.0%} of them"
    return line + ("; an ETA for the whole law follows once a budget has run start to end "
                   "(figures for the shipped law.toml: benchmarks/RESULTS.md)")


def budget_line(spec: StudySpec, i: int, *, done_here: int = 0,
                rate: float | None = None) -> str:
    """The line as budget ``i`` starts. ``done_here``: its trials already finished (a resume);
    ``rate``: tokens per second of the last budget that ran start to end in this process."""
    work = law_work(spec)
    w = work[i]
    total = sum(x.total for x in work)
    before = sum(x.total for x in work[:i]) + w.tokens * done_here
    line = (f"{spec.name}: budget {i + 1}/{len(work)} ({w.tokens:,} tokens per trial), "
            f"{done_here}/{w.trials} trials"
            + (f", then {w.noise_runs} noise re-trainings" if w.noise_runs else "")
            + f"; {before / total:.0%} of the law's tokens trained")
    if i + 1 < len(work):
        line += f"; the next budget trains {work[i + 1].total / w.total:.1f}x this one's tokens"
    if rate:
        line += (f"; about {_duration((total - before) / rate)} left at the last budget's "
                 f"{rate:,.0f} tokens/s")
    return line


def _tokens(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n:,}"


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"
