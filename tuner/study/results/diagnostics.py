"""What a study's result cannot tell by itself, said once for the report and the export: a chosen
value at the edge of its search range (the optimum may lie beyond it), and a searched knob that
never varied among the usable trials (the study says nothing about it).

    >>> edge_warnings(study.trials, trial_number, trial_records(study))  # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial

from tuner.study.results.trial_record import TrialRecord

EDGE = 0.05  # share of a search range at each end counted as its edge


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
                   f"widen the range and tune again.")
    return out


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
