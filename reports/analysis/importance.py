"""Parameter importances per objective, as plain numbers with their uncertainty, from Optuna's
evaluators.

Computed on the feasible trials only: infeasible trials carry worst-case stand-in values (a
diverged run has no real loss) that would make every parameter near a cliff look important.

Uncertainty at the study's n: the feasible trials are resampled with replacement
`resample_count(n)` times (the nonparametric bootstrap, Efron & Tibshirani 1993, "An
Introduction to the Bootstrap", ch. 6 and 13), the evaluator is refitted on each resample, and
each parameter gets
the mean of its normalised importance and the 2.5–97.5 percentile interval (a 95% percentile
interval). The resamples are drawn from a fixed seed, so a report is reproducible. A parameter
that never varied (one value in every feasible trial,
`tuner.study.results.diagnostics.unvaried_params`) gets no importance, only a line saying so: the
study measured no effect of it. An objective ranks only the parameters its metric can depend on
(`tuner.study.specs.metrics.depends_on`): a timed throughput the systems knobs, a modeled
full-run cost the precision; the others get no share of it and a line saying why (any share they
drew would be the noise of the fit).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import optuna

from reports.analysis.snapshot import Snapshot
from tuner.study.results.diagnostics import unvaried_params
from tuner.study.specs import metrics

MIN_TRIALS = 2
# Bootstrap resamples per report: each copies the n feasible trials into a study and refits the
# evaluator once per objective, its cost growing with n (benchmarks/RESULTS.md, "Report
# importances": ~40 ms per resample at n = 100, ~270 ms at n = 1000, on a loaded 2-core machine).
# So the count is bounded by the work, about `WORK` trial copies, between `MIN_RESAMPLES` and
# `RESAMPLES` (100 up to n = 100, 20 from n = 500): a report spends a few seconds here at most.
RESAMPLES = 100
MIN_RESAMPLES = 20
WORK = 10_000
LEVEL = 0.95  # the interval's coverage
SEED = 0


@dataclass(frozen=True, kw_only=True)
class Importances:
    """``values[objective][param]`` = the bootstrap mean of the parameter's share of the
    objective's importance (sums to 1 per objective); ``low`` and ``high`` its `LEVEL` interval
    over ``resamples`` resamples of the ``n_trials`` feasible trials.

    ``unvaried`` lists the parameters that never varied (no importance); ``notes`` says why an
    objective has no importances (too few trials, nothing varied, ...).
    """

    evaluator: str
    n_trials: int
    resamples: int = 0
    values: dict[str, dict[str, float]] = field(default_factory=dict)
    low: dict[str, dict[str, float]] = field(default_factory=dict)
    high: dict[str, dict[str, float]] = field(default_factory=dict)
    unvaried: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def how(self) -> str:
        """How the numbers were computed, for every place that shows them."""
        return (f"{self.evaluator}, feasible trials only, n = {self.n_trials}; mean over "
                f"{self.resamples} bootstrap resamples of the trials (the evaluator refitted on "
                f"each) with its {LEVEL:.0%} interval")

    def interval(self, objective: str, param: str) -> tuple[float, float]:
        """The `LEVEL` interval of one importance (NaN, NaN when it has none)."""
        return (self.low.get(objective, {}).get(param, float("nan")),
                self.high.get(objective, {}).get(param, float("nan")))


def resample_count(n: int) -> int:
    """Bootstrap resamples for ``n`` feasible trials (`WORK`)."""
    return max(MIN_RESAMPLES, min(RESAMPLES, WORK // max(n, 1)))


def param_importances(snapshot: Snapshot, *,
                      evaluator: optuna.importance.BaseImportanceEvaluator | None = None,
                      resamples: int | None = None) -> Importances:
    """PED-ANOVA importances (deterministic, needs no scikit-learn) per objective, each with its
    bootstrap interval over ``resamples`` resamples (default `resample_count`; module
    docstring).

    Example:
        >>> imp = param_importances(take_snapshot(study))
        >>> imp.values["val_loss"], imp.interval("val_loss", "lr")
        ({'lr': 0.71, 'warmup_fraction': 0.2, ...}, (0.52, 0.88))
    """
    evaluator = evaluator or optuna.importance.PedAnovaImportanceEvaluator()
    feasible = set(snapshot.frame.loc[snapshot.frame["feasible"].astype(bool), "number"])
    trials = [t for t in snapshot.trials if t.number in feasible]
    unvaried = unvaried_params([r for r in snapshot.records if r.number in feasible])
    resamples = resample_count(len(trials)) if resamples is None else resamples
    result = Importances(evaluator=type(evaluator).__name__, n_trials=len(trials),
                         resamples=resamples, unvaried=unvaried)
    result.notes.extend(f"{p} never varied (one value in all {len(trials)} feasible trials): no "
                        "importance; the study measured no effect of it." for p in unvaried)
    if len(trials) < MIN_TRIALS:
        result.notes.append(f"needs at least {MIN_TRIALS} feasible trials, have {len(trials)}")
        return result
    params = sorted({p for t in trials for p in t.params} - set(unvaried))
    if not params:
        result.notes.append("no parameter varied among the feasible trials: nothing to rank")
        return result
    own = _params_per_objective(snapshot, params, result.notes)
    rng = np.random.default_rng(SEED)
    draws: dict[str, list[dict[str, float]]] = {o.name: [] for o in snapshot.objectives}
    for _ in range(resamples):
        sample = [trials[i] for i in rng.integers(0, len(trials), len(trials))]
        study = _feasible_study(snapshot, sample)
        for k, obj in enumerate(snapshot.objectives):
            if not own[obj.name]:
                continue
            fit = _fit(study, sample, own[obj.name], evaluator, k, obj.direction)
            if isinstance(fit, str):
                result.notes.append(f"{obj.name}: not computed ({fit})")
                return _summarise(result, draws, own)
            draws[obj.name].append(fit)
    return _summarise(result, draws, own)


def _params_per_objective(snapshot: Snapshot, params: list[str],
                          notes: list[str]) -> dict[str, list[str]]:
    """Each objective's parameters: those its metric can depend on; a note names the rest."""
    own: dict[str, list[str]] = {}
    for obj in snapshot.objectives:
        own[obj.name] = [p for p in params if metrics.depends_on(obj.name, p)]
        left = [p for p in params if p not in own[obj.name]]
        if left:
            notes.append(f"{obj.name} does not depend on {', '.join(left)}: not ranked for it"
                         + ("" if own[obj.name] else " (nothing left to rank)") + ".")
    return own


def _fit(study: optuna.Study, sample: Sequence[optuna.trial.FrozenTrial], params: list[str],
         evaluator: optuna.importance.BaseImportanceEvaluator, k: int,
         direction: str) -> dict[str, float] | str:
    """One fit of the evaluator on one resample: normalised importances (0 for a parameter the
    resample does not contain), or why it failed."""
    # Evaluators look for what makes the target small: flip maximised objectives.
    sign = -1.0 if direction == "maximize" else 1.0
    present = [p for p in params if any(p in t.params for t in sample)]
    try:
        with warnings.catch_warnings():  # PED-ANOVA's reminder of exactly that
            warnings.simplefilter("ignore", UserWarning)
            fit = optuna.importance.get_param_importances(
                study, evaluator=evaluator, params=present, target=_signed(k, sign))
    except (ValueError, RuntimeError) as exc:
        return str(exc)
    return {p: float(fit.get(p, 0.0)) for p in params}


def _summarise(result: Importances, draws: dict[str, list[dict[str, float]]],
               own: dict[str, list[str]]) -> Importances:
    """Mean and `LEVEL` percentile interval of each parameter's importance over the draws."""
    tail = 100 * (1 - LEVEL) / 2
    for obj, fits in draws.items():
        if not fits:
            continue
        params = own[obj]
        table = np.array([[f[p] for p in params] for f in fits])  # (resamples, params)
        mean = table.mean(axis=0)
        low, high = np.percentile(table, [tail, 100 - tail], axis=0)
        order = np.argsort(-mean, kind="stable")
        result.values[obj] = {params[i]: float(mean[i]) for i in order}
        result.low[obj] = {params[i]: float(low[i]) for i in order}
        result.high[obj] = {params[i]: float(high[i]) for i in order}
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
