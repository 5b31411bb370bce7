"""The law's progress across its budgets: the plan line `law_stages` prints before the first
budget, and the line it prints as each budget starts (which budget of how many, its trials and
noise re-trainings, the share of the law's tokens already trained, how much larger the next
budget is, and an ETA for the whole law once a budget has run start to end in this process).

A law's budgets differ in size by 3-5x each and its held-out budget is most of its tokens, so a
per-budget bar's ETA says little about the whole; these lines say it in tokens, which is what
the trainings' time follows (the batch is the same at every budget of a law at one batch).
The ETA is this run's own measured rate (`LawClock`): every budget timed start to end here,
pooled (all their tokens over all their seconds, so one budget's load does not swing it),
with the range the slowest and the fastest of those budgets give. A machine's load moves it
several-fold (benchmarks/RESULTS.md has the shipped law's quiet figure), and a small budget's
fixed cost per training makes its rate the slowest, so the first ETA runs high.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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


@dataclass(kw_only=True)
class LawClock:
    """The seconds each budget of ``spec`` took start to end in this process (`record`), and
    the tokens per second they measured: pooled (`rate`) and the slowest and fastest budget's
    (`rates`)."""

    spec: StudySpec
    seconds: dict[int, float] = field(default_factory=dict)  # budget index -> wall seconds

    def record(self, i: int, seconds: float) -> None:
        self.seconds[i] = max(seconds, 1e-9)

    def rate(self) -> float | None:
        """All timed budgets' tokens over all their seconds (None before one is timed)."""
        if not self.seconds:
            return None
        work = law_work(self.spec)
        return sum(work[i].total for i in self.seconds) / sum(self.seconds.values())

    def rates(self) -> tuple[float, float] | None:
        """The slowest and the fastest timed budget's tokens per second."""
        work = law_work(self.spec)
        each = [work[i].total / s for i, s in self.seconds.items()]
        return (min(each), max(each)) if each else None


def budget_line(spec: StudySpec, i: int, *, done_here: int = 0,
                clock: LawClock | None = None) -> str:
    """The line as budget ``i`` starts. ``done_here``: its trials already finished (a resume);
    ``clock``: the budgets timed start to end in this process so far (the ETA's rate)."""
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
    rate = clock.rate() if clock is not None else None
    if clock is not None and rate:
        left, (slow, fast) = total - before, clock.rates() or (rate, rate)
        n = len(clock.seconds)
        line += f"; about {_duration(left / rate)} left at this run's {rate:,.0f} tokens/s"
        line += (f" ({_duration(left / fast)} to {_duration(left / slow)} at its fastest and "
                 f"slowest of {n} budgets timed)" if n > 1 and fast > slow
                 else " (1 budget timed; small budgets run slowest per token)")
    return line


def _tokens(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n:,}"


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"
