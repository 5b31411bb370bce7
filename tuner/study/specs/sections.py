"""The sections that are plain values: ``[study]``, ``[budget]``, ``[pruning]`` and
``[resources]``. Each checks its own values in ``__post_init__`` wherever it is built (a parsed
spec, a stored one, a law's budget, a ladder's rung); the defaults that follow the budget and
the rule across ``[budget]`` and ``[pruning]`` are `parse_budget_and_pruning`'s.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainers.config.validation import require
from tuner.study.specs.sampler_registry import AUTO, missing_modules, sampler_names
from tuner.study.specs.table import SpecError, section
from tuner.study.specs.urls import URL_PREFIXES

SCHEDULERS = ("auto", "asha", "none")
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # used with fullmatch: no "\n" at the end


@dataclass(frozen=True, kw_only=True)
class StudySection:
    name: str
    n_trials: int = 12
    max_concurrent: int = 2
    seed: int = 0
    sampler: str = "auto"
    # random trials before TPE/GP model the results; "auto" =
    # tuner.study.trial.samplers.startup_trials
    startup_trials: int | str = "auto"
    storage: str = ""  # "" = sqlite file in the study's run folder
    # val_loss noise: re-train the noise_top best feasible trials with this many other seeds
    # once the study is done (tuner.study.results.noise; not counted in n_trials); 0 = not measured
    noise_repeats: int = 0
    noise_top: int = 2

    def __post_init__(self) -> None:
        """The section checks itself (as `trainers.config.recipe.Recipe` does), wherever it is
        built:
        a parsed spec, a stored one, a law's budget or a ladder's rung."""
        def rule(ok: bool, key: str, text: str, value: object) -> None:
            require(ok, f"study.{key}", text, value, error=SpecError)

        rule(bool(NAME_RE.fullmatch(self.name)), "name",
             "must be 1-64 characters of letters, digits, '_', '-', '.' (a folder name)",
             self.name)
        rule(self.n_trials >= 1, "n_trials", "must be >= 1", self.n_trials)
        rule(self.max_concurrent >= 1, "max_concurrent", "must be >= 1", self.max_concurrent)
        # the samplers seed numpy's legacy generator, which takes 32 bits
        rule(0 <= self.seed < 2**32, "seed", "must be an integer in [0, 2**32)", self.seed)
        rule(self.sampler in sampler_names(), "sampler", f"must be one of {sampler_names()}",
             self.sampler)
        rule(self.noise_repeats >= 0, "noise_repeats", "must be >= 0 (0 = noise not measured)",
             self.noise_repeats)
        rule(self.noise_top >= 1, "noise_top", "must be >= 1", self.noise_top)
        rule(self.startup_trials == "auto" or (isinstance(self.startup_trials, int)
                                               and self.startup_trials >= 1),
             "startup_trials", "must be an integer >= 1 or \"auto\"", self.startup_trials)
        missing = missing_modules(self.sampler) if self.sampler != AUTO else []
        rule(not missing, "sampler", f"{self.sampler!r} needs {', '.join(missing)} installed "
             f"(pip install {' '.join(missing)})", self.sampler)
        if self.storage:
            rule(self.storage.startswith(URL_PREFIXES), "storage",
                 "must be '' (a sqlite file in the run folder) or a database URL "
                 "(sqlite:///…, postgresql://…)", self.storage)


@dataclass(frozen=True, kw_only=True)
class BudgetSection:
    tokens_per_trial: int = 200_000
    # unset in a spec: a quarter of the budget, at most 50,000 (`parse_budget_and_pruning`)
    eval_every_tokens: int = 50_000

    def __post_init__(self) -> None:
        """Checks its own values, as `StudySection` does."""
        require(self.tokens_per_trial > 0, "budget.tokens_per_trial", "must be > 0",
                self.tokens_per_trial, error=SpecError)
        require(0 < self.eval_every_tokens <= self.tokens_per_trial, "budget.eval_every_tokens",
                f"must be in (0, tokens_per_trial={self.tokens_per_trial}]",
                self.eval_every_tokens, error=SpecError)


@dataclass(frozen=True, kw_only=True)
class PruningSection:
    scheduler: str = "auto"
    grace_tokens: int = 50_000  # unset in a spec: one evaluation interval
    reduction_factor: float = 3.0

    def __post_init__(self) -> None:
        """Checks its own values, as `StudySection` does; the grace against the budget is a
        rule across sections (`parse_budget_and_pruning`)."""
        require(self.scheduler in SCHEDULERS, "pruning.scheduler",
                f"must be one of {SCHEDULERS}", self.scheduler, error=SpecError)
        if self.scheduler == "none":
            return
        require(self.grace_tokens > 0, "pruning.grace_tokens", "must be > 0",
                self.grace_tokens, error=SpecError)
        require(self.reduction_factor > 1, "pruning.reduction_factor", "must be > 1",
                self.reduction_factor, error=SpecError)


MIN_CPUS_PER_TRIAL = 0.01  # Ray's resource quantum is 1e-4; 1% of a core is the least share
MAX_TRIAL_TIMEOUT_S = 30 * 24 * 3600.0


@dataclass(frozen=True, kw_only=True)
class ResourcesSection:
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    # wall-clock seconds one trial may run; a trial past it is ended and recorded infeasible
    # (reason "timeout"). An hour: 10-100x a proxy trial of the shipped presets on a CPU.
    trial_timeout_s: float = 3600.0

    def __post_init__(self) -> None:
        """Checks itself, as `StudySection` does: Ray schedules resources in steps of 1e-4, so
        a share below `MIN_CPUS_PER_TRIAL` is no share; a timeout past `MAX_TRIAL_TIMEOUT_S`
        is none."""
        for key, ok, text in (
                ("cpus_per_trial", MIN_CPUS_PER_TRIAL <= self.cpus_per_trial < math.inf,
                 f"must be a finite number >= {MIN_CPUS_PER_TRIAL}"),
                ("gpus_per_trial", 0 <= self.gpus_per_trial < math.inf,
                 "must be a finite number >= 0"),
                ("trial_timeout_s", 0 < self.trial_timeout_s <= MAX_TRIAL_TIMEOUT_S,
                 f"must be > 0 and <= {MAX_TRIAL_TIMEOUT_S:.0f} seconds (30 days)")):
            require(ok, f"resources.{key}", text, getattr(self, key), error=SpecError)


def parse_budget_and_pruning(budget: Mapping[str, Any],
                        pruning: Mapping[str, Any]) -> tuple[BudgetSection, PruningSection]:
    """``[budget]`` and ``[pruning]``. Unset intervals follow the budget: a quarter of it
    between evaluations, and ASHA's grace one evaluation, so a spec that only shrinks
    tokens_per_trial stays valid. Each section checks its own values; the grace must fit the
    budget (a rule across the two)."""
    budget, pruning = dict(budget), dict(pruning)
    tokens = budget.get("tokens_per_trial", BudgetSection.tokens_per_trial)
    if ("eval_every_tokens" not in budget and isinstance(tokens, int)
            and not isinstance(tokens, bool) and tokens > 0):
        budget["eval_every_tokens"] = min(50_000, max(1, tokens // 4))
    b = section(BudgetSection, budget, "budget")
    pruning.setdefault("grace_tokens", b.eval_every_tokens)
    p = section(PruningSection, pruning, "pruning")
    if p.scheduler != "none":
        require(p.grace_tokens <= b.tokens_per_trial, "pruning.grace_tokens",
                f"must be in (0, tokens_per_trial={b.tokens_per_trial}]", p.grace_tokens,
                error=SpecError)
    return b, p


def resolve_pruning(pruning: PruningSection) -> PruningSection:
    """``auto``: no pruning; ASHA is there to ask for (``scheduler = "asha"``).

    With several objectives ASHA, which ranks by val_loss alone, prunes the fast large-batch end
    of the Pareto front; with val_loss alone GP, the default sampler, did better without it on
    the search-efficiency replays (figures in benchmarks/RESULTS.md, "Search efficiency"). The
    resolved choice is what the stored spec shows.
    """
    if pruning.scheduler != "auto":
        return pruning
    return dataclasses.replace(pruning, scheduler="none")
