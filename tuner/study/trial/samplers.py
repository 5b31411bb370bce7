"""The Optuna sampler a spec asks for, seeded, with constraints honoured.

Constraints reach every sampler through ``trial.set_constraint`` (Optuna 5.0): TPE, GP and
NSGA-II read ``trial.constraints`` of finished trials, so no ``constraints_func`` is needed.
"""

from __future__ import annotations

import importlib.util
import warnings
from typing import Any

import numpy as np
import optuna
from optuna.trial import FrozenTrial

from search_spaces.loader import SearchSpace
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
    has_scipy = importlib.util.find_spec("scipy") is not None  # GPSampler needs it
    if space.has_conditions():
        return "random"
    if has_scipy and spec.study.n_trials <= GP_MAX_TRIALS:
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


class SpaceQMCSampler(optuna.samplers.QMCSampler):
    """Optuna's QMC sampler told the search space up front, so its first trial is a point of the
    Sobol sequence too.

    Optuna's infers the space from the first trial, which its independent (random) sampler
    draws: n trials then hold one random point and the sequence's first n - 1, whose balance
    (one point in each 1/n of every axis, for n a power of 2) is lost. A law budget's 8 trials
    never sampled the top eighth of its lr range at any budget (above 0.031 of 3e-4..6e-2),
    and its smallest budget's optimum sat on that edge. An enqueued trial takes no point of
    the design. A space with conditions keeps Optuna's inference (QMC has no conditional
    design).
    """

    def __init__(self, space: dict[str, optuna.distributions.BaseDistribution] | None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._space = None if space is None else dict(space)

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial
                                    ) -> dict[str, optuna.distributions.BaseDistribution]:
        if self._space is None:
            return super().infer_relative_search_space(study, trial)
        return dict(self._space)

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, optuna.distributions.BaseDistribution]
                        ) -> dict[str, Any]:
        if trial.system_attrs.get("fixed_params"):
            # an enqueued trial (a law's predicted recipe, a warm start) brings its own point:
            # the design's next point is kept for the next proposed trial
            return {}
        return super().sample_relative(study, trial, search_space)


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
    """The sampler ``[study] sampler`` names (``cells``: a parameter a `CellSampler` sets)."""
    seed = sampler_seed(spec.study.seed, n_existing)
    n = spec.study.n_trials
    startup = startup_trials(spec)
    name = resolve_sampler_name(spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if name == "tpe":
            return optuna.samplers.TPESampler(
                seed=seed, n_startup_trials=startup, multivariate=True,
                group=spec.space.has_conditions(),
                # With parallel trials, pretend running ones scored badly so they are not
                # proposed twice.
                constant_liar=spec.study.max_concurrent > 1)
        if name == "gp":
            return optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup)
        if name == "nsga2":
            return optuna.samplers.NSGAIISampler(seed=seed,
                                                 population_size=max(4, min(50, n // 4)))
        if name == "qmc":  # a scrambled Sobol design: the space covered evenly, for a surface
            space = None if spec.space.has_conditions() else {
                k: v for k, v in spec.space.distributions().items() if k != cells}
            return SpaceQMCSampler(space, qmc_type="sobol",
                                   scramble=True, seed=seed, warn_independent_sampling=False,
                                   warn_asynchronous_seeding=False)
        return optuna.samplers.RandomSampler(seed=seed)
