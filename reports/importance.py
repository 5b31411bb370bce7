"""Parameter importances per objective, as plain numbers, from Optuna's evaluators.

Computed on the feasible trials only: infeasible trials carry worst-case stand-in values (a
diverged run has no real loss) that would make every parameter near a cliff look important.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import optuna

from reports.snapshot import Snapshot

MIN_TRIALS = 2


@dataclass(frozen=True, kw_only=True)
class Importances:
    """``values[objective][param]`` = share of the objective's variance (sums to 1 per objective).

    ``note`` says why an objective has no importances (too few trials, nothing varied, ...).
    """

    evaluator: str
    n_trials: int
    values: dict[str, dict[str, float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def param_importances(snapshot: Snapshot, *,
                      evaluator: optuna.importance.BaseImportanceEvaluator | None = None,
                      ) -> Importances:
    """PED-ANOVA importances (deterministic, needs no scikit-learn) per objective.

    Example:
        >>> param_importances(take_snapshot(study)).values["val_loss"]
        {'lr': 0.71, 'warmup_fraction': 0.2, ...}
    """
    evaluator = evaluator or optuna.importance.PedAnovaImportanceEvaluator()
    feasible = set(snapshot.frame.loc[snapshot.frame["feasible"].astype(bool), "number"])
    trials = [t for t in snapshot.trials if t.number in feasible]
    result = Importances(evaluator=type(evaluator).__name__, n_trials=len(trials))
    if len(trials) < MIN_TRIALS:
        result.notes.append(f"needs at least {MIN_TRIALS} feasible trials, have {len(trials)}")
        return result
    study = _feasible_study(snapshot, trials)
    for k, obj in enumerate(snapshot.objectives):
        # Evaluators look for what makes the target small: flip maximised objectives.
        sign = -1.0 if obj.direction == "maximize" else 1.0
        try:
            with warnings.catch_warnings():  # PED-ANOVA's reminder of exactly that
                warnings.simplefilter("ignore", UserWarning)
                result.values[obj.name] = optuna.importance.get_param_importances(
                    study, evaluator=evaluator, target=_signed(k, sign))
        except (ValueError, RuntimeError) as exc:  # e.g. no parameter varied
            result.notes.append(f"{obj.name}: not computed ({exc})")
    return result


def _signed(k: int, sign: float) -> Callable[[optuna.trial.FrozenTrial], float]:
    """The evaluators' target: objective k of a trial, times sign."""
    return lambda t: sign * t.values[k]


def _feasible_study(snapshot: Snapshot, trials: list[optuna.trial.FrozenTrial]) -> optuna.Study:
    directions = [optuna.study.StudyDirection.MAXIMIZE if o.direction == "maximize"
                  else optuna.study.StudyDirection.MINIMIZE for o in snapshot.objectives]
    study = optuna.create_study(directions=directions)
    for t in trials:
        study.add_trial(optuna.trial.create_trial(
            state=optuna.trial.TrialState.COMPLETE, values=t.values, params=t.params,
            distributions=t.distributions))
    return study
