"""The Optuna sampler a spec asks for, seeded, with constraints honoured: ``auto`` resolved,
the seed and the random start decided here, the sampler built by its entry in
`tuner.study.specs.sampler_registry` (an unknown name raises, never a silent fallback).

Constraints reach every sampler through ``trial.set_constraint`` (Optuna 5.0): TPE, GP and
NSGA-II read ``trial.constraints`` of finished trials, so no ``constraints_func`` is needed.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import optuna
from optuna.trial import FrozenTrial

from search_spaces.loader import SearchSpace
from tuner.study.specs.sampler_registry import SamplerArgs, missing_modules, sampler_entry
from tuner.study.specs.spec import StudySpec

GP_MAX_TRIALS = 300  # beyond this a GP fit per proposal costs seconds
SAMPLER_NOTES = {"random": "sampler auto -> random on a conditional space: no sampler has been "
                           "measured ahead of random search there (tuner.study.trial.samplers)"}


def resolve_sampler_name(spec: StudySpec) -> str:
    """``auto`` (the default): GP for an unconditional space of any objectives (it reached random
    search's result with ~1/3 of its compute in benchmarks/RESULTS.md, "Search efficiency"),
    random search for conditional spaces, and for very long studies (GP's cost grows with
    trials) NSGA-II if several objectives, else TPE.

    Why random on conditional spaces: no sampler has been measured ahead of random there. On
    real trainings of search_spaces/deepseek_v3.toml grouped multivariate TPE tied random in one
    campaign (benchmarks/RESULTS.md, "Samplers on real trainings (measured)") and ended behind it
    beyond the noise in another (median best 2.95 vs 2.81, sd 0.076, 3 seeds); GP samples
    conditional knobs at random. `SAMPLER_NOTES` is what ``submit`` says about the choice."""
    name = spec.study.sampler
    if name != "auto":
        return name
    space: SearchSpace = spec.space
    if space.has_conditions():
        return "random"
    if not missing_modules("gp") and spec.study.n_trials <= GP_MAX_TRIALS:
        return "gp"
    return "nsga2" if len(spec.objectives) > 1 else "tpe"


def startup_trials(spec: StudySpec) -> int:
    """Random trials before TPE or GP fit a model: ``[study] startup_trials`` if set, else
    (``"auto"``) a third of the study, between 2 and 10 trials for TPE and between 2 and 3 for
    GP. GP's smaller cap is the measured better one: on the search-efficiency replays, GP reached
    random search's final hypervolume with fewer tokens after 3 random trials than after 10, at
    an equal or better final result (figures in benchmarks/RESULTS.md, "Search efficiency")."""
    if spec.study.startup_trials != "auto":
        return int(spec.study.startup_trials)
    cap = 3 if resolve_sampler_name(spec) == "gp" else 10
    return max(2, min(cap, spec.study.n_trials // 3))


def sampler_seed(seed: int, n_existing: int) -> int:
    """The seed for a sampler that joins a study already holding ``n_existing`` trials.

    A fresh study (0 trials) uses ``[study] seed`` itself, so it stays reproducible. A resumed
    one must not: a sampler seeded as at the start would replay the random draws the first
    driver already ran (the same startup configs again). Mixing in the trial count gives each
    resume point its own, still deterministic, stream.
    """
    if n_existing == 0:
        return seed
    return int(np.random.SeedSequence([seed, n_existing]).generate_state(1)[0])


class CellSampler(optuna.samplers.BaseSampler):
    """``base`` with one categorical (a law's ``batch_end``, `tuner.study.specs.law_spec`) taken
    out of its hands: the k-th proposed trial of a study (enqueued trials not counted) gets
    ``choices[(k // per_cell) % len(choices)]``, so the choices come in blocks of ``per_cell``
    trials and each block is a cell that ``base`` designs on its own: for QMC, a block of
    2^m consecutive Sobol points puts one in each 1/2^m of the lr axis, so every cell covers
    the lr range as evenly as a study of ``per_cell`` trials at one batch would. Why blocks and
    not a categorical axis in the design: Optuna's QMC sampler draws a categorical at random,
    so cells would get unequal counts (an 8-trial cell could get 5), and a cell needs its lr
    bowl covered to place its optimum.
    """

    def __init__(self, base: optuna.samplers.BaseSampler, *, name: str,
                 choices: tuple[Any, ...], per_cell: int) -> None:
        self._base, self._name = base, name
        self._choices, self._per_cell = tuple(choices), max(1, per_cell)

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial
                                    ) -> dict[str, optuna.distributions.BaseDistribution]:
        space = self._base.infer_relative_search_space(study, trial)
        return {k: v for k, v in space.items() if k != self._name}

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, optuna.distributions.BaseDistribution]
                        ) -> dict[str, Any]:
        return self._base.sample_relative(study, trial, search_space)

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: optuna.distributions.BaseDistribution) -> Any:
        if param_name != self._name:
            return self._base.sample_independent(study, trial, param_name, param_distribution)
        k = sum(1 for t in study.get_trials(deepcopy=False)
                if t.number < trial.number and not t.system_attrs.get("fixed_params"))
        return self._choices[(k // self._per_cell) % len(self._choices)]

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self._base.before_trial(study, trial)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: Any,
                    values: Any) -> None:
        self._base.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self._base.reseed_rng()


def make_sampler(spec: StudySpec, *, n_existing: int = 0) -> optuna.samplers.BaseSampler:
    """A fresh sampler for ``spec``; same spec and seed → same proposals given the same history.

    ``n_existing``: trials the study already holds (on resume); see `sampler_seed`.
    TPE and GP start with `startup_trials` random trials; NSGA-II ignores that setting (its
    first generation, ``population_size`` trials, is its random start) and so does random.
    A law with ``batches`` gets its sampler inside a `CellSampler` over ``batch_end``.
    """
    batches = spec.law.stage_batches
    base = _sampler(spec, n_existing=n_existing, cells="batch_end" if batches else "")
    if not batches:
        return base
    return CellSampler(base, name="batch_end", choices=batches,
                       per_cell=spec.study.n_trials // len(batches))


def _sampler(spec: StudySpec, *, n_existing: int, cells: str) -> optuna.samplers.BaseSampler:
    """The sampler ``[study] sampler`` names, built by its registry entry (``cells``: a
    parameter a `CellSampler` sets).

    Raises:
        ValueError: a name the registry does not hold (`sampler_entry`).
    """
    entry = sampler_entry(resolve_sampler_name(spec))
    args = SamplerArgs(seed=sampler_seed(spec.study.seed, n_existing),
                       n_trials=spec.study.n_trials, startup=startup_trials(spec),
                       space=spec.space, n_objectives=len(spec.objectives),
                       max_concurrent=spec.study.max_concurrent, cells=cells)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return entry.build(args)
