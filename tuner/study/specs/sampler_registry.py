"""The sampler registry: every name ``[study] sampler`` may give, and how each is built.

The spec accepts exactly these names (and ``"auto"``, which `tuner.study.trial.samplers`
resolves to one of them), and a study builds its sampler from the entry its name picks, so the
names the spec accepts and the samplers a study can build are one table. It is declared here,
beside the spec that checks the names (as the metric table is), not registered from elsewhere
at import time. A new sampler is one entry::

    "cmaes": SamplerEntry(build=lambda a: optuna.samplers.CmaEsSampler(seed=a.seed)),

and `tests/tuner/test_tuner_samplers.py` runs every entry through the same conformance suite.

    >>> sampler_entry("tpe").needs
    ()
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from search_spaces.loader import SearchSpace


@dataclass(frozen=True, kw_only=True)
class SamplerArgs:
    """What a builder gets: the study's settings that a sampler reads, already resolved."""

    seed: int  # `tuner.study.trial.samplers.sampler_seed`: a resumed study's differs
    n_trials: int
    startup: int  # random trials before a model-based sampler fits (`startup_trials`)
    space: SearchSpace
    n_objectives: int
    max_concurrent: int
    cells: str = ""  # a parameter a `CellSampler` sets, so the builder leaves it out


@dataclass(frozen=True, kw_only=True)
class SamplerEntry:
    """One sampler: its builder and the modules it needs installed (a spec naming a sampler
    whose module is missing is refused with the ``pip install`` that fixes it)."""

    build: Callable[[SamplerArgs], optuna.samplers.BaseSampler]
    needs: tuple[str, ...] = ()


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


def _tpe(a: SamplerArgs) -> optuna.samplers.BaseSampler:
    return optuna.samplers.TPESampler(
        seed=a.seed, n_startup_trials=a.startup, multivariate=True,
        group=a.space.has_conditions(),
        # With parallel trials, pretend running ones scored badly so they are not
        # proposed twice.
        constant_liar=a.max_concurrent > 1)


def _gp(a: SamplerArgs) -> optuna.samplers.BaseSampler:
    return optuna.samplers.GPSampler(seed=a.seed, n_startup_trials=a.startup)


def _nsga2(a: SamplerArgs) -> optuna.samplers.BaseSampler:
    return optuna.samplers.NSGAIISampler(seed=a.seed,
                                         population_size=max(4, min(50, a.n_trials // 4)))


def _qmc(a: SamplerArgs) -> optuna.samplers.BaseSampler:
    """A scrambled Sobol design: the space covered evenly, for a response surface."""
    space = None if a.space.has_conditions() else {
        k: v for k, v in a.space.distributions().items() if k != a.cells}
    return SpaceQMCSampler(space, qmc_type="sobol", scramble=True, seed=a.seed,
                           warn_independent_sampling=False, warn_asynchronous_seeding=False)


def _random(a: SamplerArgs) -> optuna.samplers.BaseSampler:
    return optuna.samplers.RandomSampler(seed=a.seed)


SAMPLER_REGISTRY: dict[str, SamplerEntry] = {
    "tpe": SamplerEntry(build=_tpe),
    "gp": SamplerEntry(build=_gp, needs=("scipy",)),
    "nsga2": SamplerEntry(build=_nsga2),
    "random": SamplerEntry(build=_random),
    "qmc": SamplerEntry(build=_qmc, needs=("scipy",)),
}
AUTO = "auto"  # not an entry: `tuner.study.trial.samplers.resolve_sampler_name` picks one


def sampler_names() -> tuple[str, ...]:
    """The names ``[study] sampler`` accepts: the registry's, then ``"auto"``."""
    return (*SAMPLER_REGISTRY, AUTO)


def sampler_entry(name: str) -> SamplerEntry:
    """The registry's entry for ``name``.

    Raises:
        ValueError: ``name`` is not in the registry (the error lists the valid names).
    """
    if name not in SAMPLER_REGISTRY:
        raise ValueError(f"sampler: unknown name {name!r}; valid names are "
                         f"{sorted(SAMPLER_REGISTRY)}.")
    return SAMPLER_REGISTRY[name]


def missing_modules(name: str) -> list[str]:
    """The modules sampler ``name`` needs that this Python cannot import."""
    return [m for m in sampler_entry(name).needs if importlib.util.find_spec(m) is None]
