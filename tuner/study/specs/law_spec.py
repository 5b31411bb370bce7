"""The ``[law]`` section: a study that fits how the optimal lr and batch move with the token
budget (`tuner.study.workflows.law` runs it; `tuner.study.workflows.law_fit` fits it).

    [law]
    tokens = [20_000, 60_000, 180_000, 540_000]  # the fitted budgets (tokens per trial),
                                # ascending: at least 4, spanning at least 1.5 decades
    held_out = 2_700_000        # predicted from the fitted budgets before it runs, then
                                # searched on its own (0: no held-out check)
    held_out_at_batch = 32      # with batches and held_out: the held-out budget searches lr at
                                # this one of the batches alone (0: at every one of them)
    held_out_batch = 128        # with batches: a batch_end >= 4x the largest, run at the
                                # largest fitted budget, lr predicted by lr*(D, B) from the
                                # fitted budgets before it runs, then searched (0: none)
    held_out_batch_budget = "held_out"  # where the held-out batch runs: "largest" (the
                                # largest fitted budget, the default) or "held_out" (the
                                # held-out budget, after its check has joined the law)
    trials = 0                  # trials per budget (0: [study] n_trials)
    batches = [2, 8, 32]        # batch_end values (sequences per step): each budget searches
                                # lr at each of them, n / len(batches) trials per (budget,
                                # batch) cell; at least 3, spanning at least 1 decade
    mup = true                  # µP based at the proxy's width: the laws are in tokens D, and
                                # the full run's hidden matrices take lr / width_mult

With ``batches`` the law is in tokens and batch: the spec's space gets ``batch_end`` searched as
a categorical over exactly those values (`law_space` adds it, and refuses a space
that fixes ``batch_end`` or searches it otherwise), and the sampler assigns the batches in blocks
of n / len(batches) trials while its own design places lr within each block
(`tuner.study.trial.samplers.CellSampler`), so every (budget, batch) cell searches lr over the same
evenly covered range and `tuner.study.workflows.law_fit` fits lr*(D, B) through the cells.

The budget study i is ``[study] name`` for i = 0 and ``<name>.t<tokens>`` above it (the
held-out budget too), all in one storage. ``budget``, ``predicted`` are written by the law into
each budget's stored spec (which budget it is; at the held-out budget, the laws' prediction
made before it ran), not by a user.

Why µP by default: the grid varies the tokens at one width (the cheapest way to span decades of
compute on a few cores), so it measures the laws' dependence on D and nothing of N. Under µP
(Tensor Programs V, arXiv:2203.03466) the base lr does not move with width, so a law in D alone
carries to the full run's width. In standard parametrization (``mup = false``) the laws are
stated in C = M·D as DeepSeek LLM's are (arXiv:2401.02954 §3.1), but at one width C only moves
with D, so their N-dependence is assumed, not measured; the export says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import optuna

from search_spaces.loader import SearchSpace, space_from_dict
from trainers.config.validation import FieldError, reject_unknown, relabel, require
from tuner.study.specs.ladder_spec import LadderSection
from tuner.study.specs.metrics import Direction
from tuner.study.specs.sections import NAME_RE, StudySection
from tuner.study.specs.table import SpecError

BUDGET_SEP = ".t"
MIN_BUDGETS = 4
MIN_DECADES = 1.5
MIN_BATCHES = 3
MIN_BATCH_DECADES = 1.0
MIN_HELD_OUT_BATCH = 4  # x the largest fitted batch
KNOWN = ("tokens", "held_out", "trials", "mup", "batches", "held_out_at_batch",
         "held_out_batch", "held_out_batch_budget", "budget", "predicted")
HELD_OUT_BATCH_BUDGETS = ("largest", "held_out")


class LawError(FieldError):
    """A ``[law]`` value breaks a rule; the message names the field, the rule and the value."""


@dataclass(frozen=True, kw_only=True)
class LawSection:
    tokens: tuple[int, ...] = ()
    held_out: int = 0
    trials: int = 0
    mup: bool = True
    batches: tuple[int, ...] = ()  # batch_end values searched at every budget (() = as the
    # space has it)
    held_out_at_batch: int = 0  # the one batch_end the held-out budget searches (0: every one
    # in batches): that budget is most of a law's tokens, and the largest batch costs least per
    # token, so a check at it alone is the cheap one
    held_out_batch: int = 0  # batch_end of the held-out batch (0: none), run at
    # `held_out_batch_at` tokens
    held_out_batch_budget: str = "largest"  # the budget the held-out batch runs at: the largest
    # fitted one, or "held_out": 5x the steps (a flat bowl at a few dozen steps places no lr*),
    # and the held-out budget, checked first, has joined the law its prediction comes from.
    # Named, not in tokens, so a spec whose budgets are edited stays whole
    budget: int = 0
    # at the held-out budget: {"lr": .., "lr_band": [lo, hi], "batch": .., "batch_band": ..}
    predicted: dict[str, Any] = field(default_factory=dict)

    @property
    def on(self) -> bool:
        return bool(self.tokens)

    @property
    def held_out_batch_at(self) -> int:
        """The tokens of the held-out batch's budget (``held_out_batch_budget``)."""
        if self.held_out_batch_budget == "held_out" and self.held_out:
            return self.held_out
        return self.tokens[-1] if self.tokens else 0

    @property
    def budgets(self) -> tuple[int, ...]:
        """Every budget's tokens: the fitted ones, the held-out one (when there is one), and
        last the held-out batch's (`held_out_batch_at`, when there is one)."""
        return (self.tokens + ((self.held_out,) if self.held_out else ())
                + ((self.held_out_batch_at,) if self.held_out_batch else ()))

    @property
    def is_held_out(self) -> bool:
        return bool(self.held_out) and self.budget == len(self.tokens)

    @property
    def held_out_batch_index(self) -> int | None:
        """The index of the held-out batch's budget (the last), or None without one."""
        return len(self.budgets) - 1 if self.held_out_batch else None

    @property
    def is_held_out_batch(self) -> bool:
        return bool(self.held_out_batch) and self.budget == self.held_out_batch_index

    @property
    def stage_batches(self) -> tuple[int, ...]:
        """The batch_end values this budget searches (`batches_at`)."""
        return self.batches_at(self.budget)

    def batches_at(self, i: int) -> tuple[int, ...]:
        """The batch_end values budget ``i`` searches: the held-out batch alone at its budget,
        ``held_out_at_batch`` alone (when set) at the held-out budget, else ``batches``."""
        if self.held_out_batch and i == self.held_out_batch_index:
            return (self.held_out_batch,)
        if self.held_out and i == len(self.tokens) and self.held_out_at_batch:
            return (self.held_out_at_batch,)
        return self.batches

    @property
    def variable(self) -> str:
        """What the laws are in: ``tokens`` (µP) or ``compute`` (standard parametrization)."""
        return "tokens" if self.mup else "compute"

    def to_dict(self) -> dict[str, Any]:
        """TOML-shaped; {} without a law (a study stored without one compares equal)."""
        if not self.on:
            return {}
        out: dict[str, Any] = {"tokens": list(self.tokens), "held_out": self.held_out,
                               "trials": self.trials, "mup": self.mup}
        if self.batches:
            out["batches"] = list(self.batches)
        if self.held_out_at_batch:
            out["held_out_at_batch"] = self.held_out_at_batch
        if self.held_out_batch:
            out["held_out_batch"] = self.held_out_batch
        if self.held_out_batch_budget != "largest":
            out["held_out_batch_budget"] = self.held_out_batch_budget
        if self.budget:
            out["budget"] = self.budget
        if self.predicted:
            out["predicted"] = dict(self.predicted)
        return out


def budget_name(study_name: str, law: LawSection, i: int) -> str:
    """The study of budget ``i``: the law's own name at i = 0, ``<name>.t<tokens>`` above,
    ``<name>.t<tokens>.b<batch_end>`` for the held-out batch."""
    if i == 0:
        return study_name
    name = f"{study_name}{BUDGET_SEP}{law.budgets[i]}"
    return name + (f".b{law.held_out_batch}" if i == law.held_out_batch_index else "")


def base_name(study_name: str, law: LawSection) -> str:
    """The law's own name, from any of its budget studies' names."""
    return study_name.rsplit(BUDGET_SEP, 1)[0] if law.budget else study_name


def parse_law(table: Any, *, study_name: str, name_re: Any) -> LawSection:
    """Validate ``[law]`` (an empty table: no law).

    Raises:
        LawError: naming the field, the rule and the value.
    """
    require(isinstance(table, Mapping), "law", "must be a table", table, error=LawError)
    reject_unknown(table, KNOWN, "law", error=LawError)
    if not table:
        return LawSection()
    tokens: Any = table.get("tokens")
    require(isinstance(tokens, list) and len(tokens) >= MIN_BUDGETS
            and all(_is_int(t) and t > 0 for t in tokens), "law.tokens",
            f"must be a list of at least {MIN_BUDGETS} positive integer token budgets", tokens,
            error=LawError)
    require(all(a < b for a, b in zip(tokens, tokens[1:])), "law.tokens",
            "must increase from the smallest budget to the largest", tokens, error=LawError)
    span = math.log10(tokens[-1] / tokens[0])
    require(span >= MIN_DECADES - 1e-9, "law.tokens",
            f"must span at least {MIN_DECADES} decades (largest/smallest >= "
            f"{10 ** MIN_DECADES:.3g}); these span {span:.2f}", tokens, error=LawError)
    held = table.get("held_out", 0)
    require(_is_int(held) and (held == 0 or held > tokens[-1]), "law.held_out",
            f"must be 0 (no held-out check) or an integer above the largest fitted budget "
            f"({tokens[-1]})", held, error=LawError)
    trials = table.get("trials", 0)
    require(_is_int(trials) and trials >= 0, "law.trials",
            "must be an integer >= 0 (0: [study] n_trials per budget)", trials, error=LawError)
    mup = table.get("mup", True)
    require(isinstance(mup, bool), "law.mup", "must be true or false", mup, error=LawError)
    batches = _batches(table.get("batches", []))
    at = table.get("held_out_at_batch", 0)
    require(_is_int(at) and (at == 0 or (at in batches and bool(held))), "law.held_out_at_batch",
            f"must be 0 (the held-out budget searches every batch) or, with law.held_out, one "
            f"of law.batches {list(batches)}", at, error=LawError)
    hob = table.get("held_out_batch", 0)
    top_batch = batches[-1] if batches else 0
    require(_is_int(hob) and (hob == 0 or (bool(batches)
                                            and hob >= MIN_HELD_OUT_BATCH * top_batch)),
            "law.held_out_batch", f"must be 0 (none) or, with law.batches, a batch_end at least "
            f"{MIN_HELD_OUT_BATCH}x the largest of them ({MIN_HELD_OUT_BATCH * top_batch or '-'})",
            hob, error=LawError)
    hob_at = table.get("held_out_batch_budget", "largest")
    # without a held-out batch it has no effect, so law.toml's value stays valid when a user
    # sets held_out_batch = 0 (and held_out = 0)
    require(hob_at in HELD_OUT_BATCH_BUDGETS and (hob_at != "held_out" or bool(held) or not hob),
            "law.held_out_batch_budget", 'must be "largest" (the largest fitted budget) or, '
            'with law.held_out, "held_out"', hob_at, error=LawError)
    n = len(tokens) + (1 if held else 0) + (1 if hob else 0)
    budget = table.get("budget", 0)
    require(_is_int(budget) and 0 <= budget < n, "law.budget",
            f"must be an integer in [0, {n - 1}] (written by the law)", budget, error=LawError)
    predicted = table.get("predicted", {})
    require(isinstance(predicted, Mapping), "law.predicted",
            "must be a table (written by the law)", predicted, error=LawError)
    law = LawSection(tokens=tuple(tokens), held_out=held, trials=trials, mup=mup,
                     batches=batches, held_out_at_batch=at, held_out_batch=hob,
                     held_out_batch_budget=hob_at, budget=budget,
                     predicted=dict(predicted))
    top = budget_name(base_name(study_name, law), law, n - 1)
    require(bool(name_re.fullmatch(top)), "study.name",
            f"must leave room for the budget suffix: the largest budget's study would be "
            f"{top!r}, past 64 characters", study_name, error=LawError)
    return law


def _batches(batches: Any) -> tuple[int, ...]:
    """``law.batches`` ([] or absent: the batch is the space's business)."""
    if batches == []:
        return ()
    require(isinstance(batches, list) and len(batches) >= MIN_BATCHES
            and all(_is_int(b) and b > 0 for b in batches), "law.batches",
            f"must be a list of at least {MIN_BATCHES} positive integer batch_end values "
            "(sequences per step)", batches, error=LawError)
    require(all(a < b for a, b in zip(batches, batches[1:])), "law.batches",
            "must increase from the smallest batch to the largest", batches, error=LawError)
    span = math.log10(batches[-1] / batches[0])
    require(span >= MIN_BATCH_DECADES - 1e-9, "law.batches",
            f"must span at least {MIN_BATCH_DECADES:g} decade of tokens per step (largest/"
            f"smallest >= {10 ** MIN_BATCH_DECADES:.3g}); these span {span:.2f}", batches,
            error=LawError)
    return tuple(batches)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def law_of_spec(table: Any, name: str, ladder: LadderSection, space: SearchSpace,
                objectives: tuple[tuple[str, Direction], ...]) -> LawSection:
    """``[law]``, and what a law needs of the rest of the spec: lr searched, val_loss an
    objective (the surface is fitted to it), no ladder beside it (one study, one kind of
    fidelity)."""
    try:
        law = parse_law(table, study_name=name, name_re=NAME_RE)
    except LawError as e:
        raise relabel(e, e.field, error=SpecError) from None
    if not law.on:
        return law
    require(not ladder.on, "law", "cannot be combined with [ladder] (a law varies the tokens "
            "at one width, a ladder the width at one budget)", sorted(table), error=SpecError)
    require("lr" in space.names(), "law",
            "needs lr searched in [space] (the law fits the optimal lr)", list(space.names()),
            error=SpecError)
    require("val_loss" in dict(objectives), "law",
            "needs val_loss among the objectives (the optimum is val_loss's)", dict(objectives),
            error=SpecError)
    seq_len = space.largest("seq_len")
    require(law.tokens[0] >= seq_len, "law.tokens",
            f"must each hold at least one sequence of the longest seq_len the space allows "
            f"(seq_len={seq_len})", list(law.tokens), error=SpecError)
    return law


def law_space(law: LawSection, space: SearchSpace, study: StudySection) -> SearchSpace:
    """The space a law with ``batches`` searches: ``batch_end`` a categorical over exactly those
    values, added here unless the space already searches it so (a stored spec does). A space
    that fixes ``batch_end``, searches it otherwise, or searches ``seq_len`` (the batches'
    tokens per step would then move with it) is refused, as is a number of trials per budget
    that the batches do not divide (every cell gets as many)."""
    if not law.batches:
        return space
    choices = list(law.stage_batches)
    require("batch_end" not in space.fixed, "space.fixed.batch_end",
            "must not be set with law.batches (the law searches every batch it lists)",
            space.fixed.get("batch_end"), error=SpecError)
    require("seq_len" not in space.names(), "space.params.seq_len",
            "must not be searched with law.batches (fix it: the batches are sequences of one "
            "length)", "searched", error=SpecError)
    n = law.trials or study.n_trials
    field = "law.trials" if law.trials else "study.n_trials"
    require(law.budget > 0 or n % len(choices) == 0, field,  # a budget's own: derived
            f"must be a multiple of len(law.batches) = {len(choices)}, so every (budget, batch) "
            "cell gets as many trials", n, error=SpecError)
    dists = space.distributions()
    if "batch_end" in dists:
        d = dists["batch_end"]
        same = (isinstance(d, optuna.distributions.CategoricalDistribution)
                and list(d.choices) == choices)
        require(same, "space.params.batch_end",
                f"must be absent with law.batches (the law searches it as categorical "
                f"{choices}) or exactly that",
                list(getattr(d, "choices", ())) or d, error=SpecError)
        return space
    return with_batches(space, choices)


def with_batches(space: SearchSpace, choices: list[int]) -> SearchSpace:
    """``space`` with ``batch_end`` searched as a categorical over ``choices``."""
    source = space.to_dict()
    params = dict(source.get("params", {}))
    params["batch_end"] = {"type": "categorical", "choices": choices}
    return space_from_dict({**source, "params": params})
