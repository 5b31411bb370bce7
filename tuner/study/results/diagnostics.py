"""What a study's result cannot tell by itself, said once for the report and the export: a chosen
value at the edge of its search range (the optimum may lie beyond it: the warning gives the range
to tune next, `next_range`), and a searched knob that never varied among the usable trials (the
study says nothing about it).

    >>> edge_warnings(study.trials, trial_number, trial_records(study))  # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial

from trainers.config.recipe import Recipe
from trainers.config.validation import FieldError
from tuner.study.results.trial_record import TrialRecord

EDGE = 0.05  # share of a search range at each end counted as its edge
# how far `next_range` moves an edge out: half the range's width (its log width for a log
# range), enough that an optimum just past the edge lands inside, and the other end is kept
# so the trials already run stay inside the next range too
WIDEN = 0.5


def position(value: float, low: float, high: float, log: bool) -> float:
    """Where ``value`` lies in [low, high], 0 to 1 (log space for a log range)."""
    if log:
        value, low, high = math.log(value), math.log(low), math.log(high)
    return (value - low) / (high - low) if high > low else 0.5


def edge_warnings(trials: Sequence[FrozenTrial], number: int,
                  finished: Sequence[TrialRecord]) -> list[str]:
    """One warning per numeric parameter of trial ``number`` (of ``trials``, a study's) in the
    outer `EDGE` of its range, with how many of the ``finished`` trials sit at that edge too."""
    trial = next(t for t in trials if t.number == number)
    out = []
    for name, dist in trial.distributions.items():
        if not isinstance(dist, (FloatDistribution, IntDistribution)) or name not in trial.params:
            continue
        at = position(trial.params[name], dist.low, dist.high, dist.log)
        side = "bottom" if at <= EDGE else "top" if at >= 1 - EDGE else ""
        if not side:
            continue
        spots = [position(r.params[name], dist.low, dist.high, dist.log)
                 for r in finished if name in r.params]
        near = sum(1 for p in spots if (p <= EDGE if side == "bottom" else p >= 1 - EDGE))
        out.append(f"at the edge of its search range: {name} = {trial.params[name]:.4g} sits at "
                   f"the {side} of [{dist.low:.4g}, {dist.high:.4g}] ({near} of "
                   f"{len(finished)} finished trials there); the best value may lie outside: "
                   f"{_next_words(name, dist, side)}")
    return out


def next_range(name: str, dist: FloatDistribution | IntDistribution,
               side: str) -> tuple[float, float] | None:
    """The range to tune ``name`` over next when the best sits at ``side`` ("bottom" or "top")
    of ``dist``: that end moved out by `WIDEN` of the range's width (in log for a log range),
    the other kept; an end the recipe's own rules refuse (a fraction past 1, a negative rate) is
    pulled back halfway towards the old one until they accept it. None when the old end is
    already the knob's limit (nothing past it is a valid value).

        >>> next_range("lr", FloatDistribution(3e-4, 6e-2, log=True), "top")  # doctest: +SKIP
        (0.0003, 0.8485...)
    """
    low, high = dist.low, dist.high
    old = low if side == "bottom" else high
    if dist.log:
        step = (math.log(high) - math.log(low)) * WIDEN
        new = math.exp(math.log(old) - step if side == "bottom" else math.log(old) + step)
    else:
        new = old - (high - low) * WIDEN if side == "bottom" else old + (high - low) * WIDEN
    for _ in range(20):
        if isinstance(dist, IntDistribution):
            new = math.floor(new) if side == "bottom" else math.ceil(new)
        if new != old and _allowed(name, new):
            return (new, high) if side == "bottom" else (low, new)
        new = (new + old) / 2
    return None


def _allowed(name: str, value: float) -> bool:
    """Whether the recipe's own rules accept ``value`` for field ``name`` (a searched knob that
    is not a recipe field has no rule here: any value)."""
    field: dict[str, Any] = {name: value}  # any field: its own type is the rules' to check
    try:
        Recipe(**field)
    except FieldError:
        return False
    except TypeError:  # not a recipe field
        return True
    return True


def _next_words(name: str, dist: FloatDistribution | IntDistribution, side: str) -> str:
    """What to tune next, in words: the range `next_range` gives, or that the edge is the knob's
    limit."""
    wider = next_range(name, dist, side)
    if wider is None:
        return (f"{dist.low if side == 'bottom' else dist.high:.4g} is already the limit of "
                f"{name}, so the best recipe takes it there.")
    how = "half its log width" if dist.log else "half its width"
    return (f"tune again with {name} in [{wider[0]:.4g}, {wider[1]:.4g}] (the {side} moved out "
            f"by {how}).")


def unvaried_params(feasible: Sequence[TrialRecord]) -> list[str]:
    """The searched parameters that took one value in every one of the (2 or more) ``feasible``
    trials, sorted: the study measured no effect of them (no importance either)."""
    names = sorted({p for r in feasible for p in r.params})
    return [name for name in names if len(feasible) >= 2
            and len({repr(r.params.get(name)) for r in feasible}) == 1]


def unvaried_warnings(feasible: list[TrialRecord]) -> list[str]:
    """A searched parameter that took one value in every feasible trial: no effect measurable."""
    return [f"{name} never varied among the {len(feasible)} feasible trials: the study measured "
            "no effect of it." for name in unvaried_params(feasible)]
