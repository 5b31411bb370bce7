"""Every sampler in the registry through one conformance suite (as Optuna's
tests/samplers_tests/test_samplers.py runs each of its samplers through the same tests), then
the choices of ``auto``, the random start and what TPE learns from constraints (no Ray needed).
A registered sampler whose module is not installed is reported as skipped, not left out."""

from __future__ import annotations

import dataclasses
import importlib.util
import math

import optuna
import pytest

from tests.utils.specs import minimal_spec
from tuner.study.specs import sampler_registry
from tuner.study.specs.sampler_registry import AUTO, SAMPLER_REGISTRY, SamplerEntry
from tuner.study.specs.spec import SpecError, spec_from_dict
from tuner.study.trial.samplers import make_sampler, resolve_sampler_name, startup_trials

SAMPLERS = [name for name in (*SAMPLER_REGISTRY, AUTO)
            if name == AUTO or not sampler_registry.missing_modules(name)]
# each registered sampler, a missing module's skipped with its name
REGISTERED = [pytest.param(name, marks=pytest.mark.skipif(
    bool(sampler_registry.missing_modules(name)),
    reason=f"{name} needs {SAMPLER_REGISTRY[name].needs}")) for name in SAMPLER_REGISTRY]


def spec_for(sampler: str, *, n: int = 30, objectives=None, space=None):
    return minimal_spec(study={"n_trials": n, "sampler": sampler},
                        objectives=objectives or {"val_loss": "minimize"},
                        space=space or {"params": {"lr": {"type": "float", "low": 1e-4,
                                                          "high": 1e-1, "log": True}}})


@pytest.mark.parametrize("sampler", [*REGISTERED, AUTO])
def test_sampler_is_seeded_and_accepts_constraints(sampler):
    def proposals(seed_spec):
        study = optuna.create_study(sampler=make_sampler(seed_spec))
        out = []
        for _ in range(12):
            t = study.ask()
            lr = seed_spec.space.suggest(t)["lr"]
            t.set_constraint("out_of_memory", 1.0 if lr > 1e-2 else -1.0)
            study.tell(t, abs(lr - 3e-3))
            out.append(lr)
        return out

    assert proposals(spec_for(sampler)) == proposals(spec_for(sampler))


MIXED = {"params": {
    "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
    "batch_end": {"type": "int", "low": 16, "high": 64, "step": 8},
    "decay": {"type": "categorical", "choices": ["cosine", "wsd"]},
    "decay_fraction": {"type": "float", "low": 0.1, "high": 0.3, "when": {"decay": ["wsd"]}}}}


def _inside(spec, params: dict) -> bool:
    """Whether ``params`` (a trial's) is a point of ``spec``'s space: every value inside its
    distribution, the conditional one present exactly under its condition."""
    dists = spec.space.distributions()
    conditional_ok = ("decay_fraction" in params) == (params.get("decay") == "wsd")
    return conditional_ok and all(dists[k]._contains(dists[k].to_internal_repr(v))
                                  for k, v in params.items())


@pytest.mark.parametrize("sampler", REGISTERED)
@pytest.mark.parametrize("two_objectives", [False, True])
def test_every_sampler_proposes_inside_the_space_for_one_objective_or_two(sampler,
                                                                          two_objectives):
    """float (log), int (step) and categorical values inside their ranges, a conditional
    parameter exactly under its condition, with one objective or two, constraints told."""
    objectives = ({"val_loss": "minimize", "tokens_per_s": "maximize"} if two_objectives
                  else None)
    spec = spec_for(sampler, n=12, objectives=objectives, space=MIXED)
    study = optuna.create_study(sampler=make_sampler(spec),
                                directions=[d for _, d in spec.objectives])
    for _ in range(12):
        t = study.ask()
        params = spec.space.suggest(t)
        assert _inside(spec, {k: v for k, v in params.items() if k in MIXED["params"]}), params
        t.set_constraint("out_of_memory", 1.0 if params["batch_end"] > 48 else -1.0)
        study.tell(t, [params["lr"], params["batch_end"]][:len(spec.objectives)])
    assert len(study.trials) == 12


@pytest.mark.parametrize("sampler", REGISTERED)
def test_every_sampler_keeps_an_enqueued_trial_s_point(sampler):
    """A start point or a law's predicted recipe is enqueued: the sampler must not move it."""
    spec = spec_for(sampler, n=8)
    study = optuna.create_study(sampler=make_sampler(spec))
    for lr in (0.02, 3e-4):
        study.enqueue_trial({"lr": lr})
        t = study.ask()
        assert spec.space.suggest(t)["lr"] == lr
        study.tell(t, lr)


def test_an_unregistered_sampler_name_raises_listing_the_registry():
    """Never a silent fallback to random search: a name the spec accepted but the registry
    does not hold (a stored spec from another version) is an error naming the valid ones."""
    spec = spec_for("tpe")
    object.__setattr__(spec.study, "sampler", "cmaes")  # past the spec's own check
    with pytest.raises(ValueError, match=r"sampler: unknown name 'cmaes'; valid names are "
                                         r"\['gp', 'nsga2', 'qmc', 'random', 'tpe'\]"):
        make_sampler(spec)


def test_the_spec_accepts_the_registry_and_asks_for_what_an_entry_needs(monkeypatch):
    """One table: a new entry is a name the spec accepts, and its missing module the
    ``pip install`` the refusal names."""
    entry = SamplerEntry(build=lambda a: optuna.samplers.RandomSampler(seed=a.seed))
    monkeypatch.setitem(SAMPLER_REGISTRY, "lhs", entry)
    assert isinstance(make_sampler(spec_for("lhs")), optuna.samplers.RandomSampler)
    needy = dataclasses.replace(entry, needs=("no_such_module_here",))
    monkeypatch.setitem(SAMPLER_REGISTRY, "lhs", needy)
    with pytest.raises(SpecError, match=r"study\.sampler: 'lhs' needs no_such_module_here "
                                        r"installed \(pip install no_such_module_here\)"):
        spec_for("lhs")


@pytest.mark.skipif(importlib.util.find_spec("scipy") is None, reason="qmc needs scipy")
@pytest.mark.parametrize("n", [8, 16])
def test_qmc_puts_one_trial_in_each_nth_of_the_range(n):
    """A law's surface wants the whole bowl: n = 2^m trials are the first n points of the
    scrambled Sobol sequence, one in each 1/n of the log range, the first trial included
    (Optuna's own QMC sampler draws its first trial at random: then 8 trials covered only 7
    strata). 16 uniform random points left gaps of 0.14-0.30 of the range (median 0.19) over
    20 seeds."""
    spec = spec_for("qmc", n=n)
    for seed in range(5):
        spec = dataclasses.replace(spec, study=dataclasses.replace(spec.study, seed=seed))
        study = optuna.create_study(sampler=make_sampler(spec))
        if seed % 2:  # an enqueued trial first (a law's predicted recipe) takes no point
            study.enqueue_trial({"lr": 0.05})
            t = study.ask()
            assert spec.space.suggest(t)["lr"] == 0.05
            study.tell(t, 0.0)
        strata = []
        for _ in range(n):
            t = study.ask()
            x = (math.log10(spec.space.suggest(t)["lr"]) + 4) / 3  # 1e-4..1e-1 -> [0, 1)
            strata.append(int(x * n))
            study.tell(t, 0.0)
        assert sorted(strata) == list(range(n)), (seed, strata)


def late_infeasible(*, constrained: bool) -> int:
    """Proposals in the 'out of memory' region (lr > 3e-3) among trials 20..39. That region
    scores best (objective -lr), so only the constraint can keep TPE out of it."""
    spec = spec_for("tpe", n=40)
    study = optuna.create_study(sampler=make_sampler(spec))
    late = 0
    for i in range(40):
        t = study.ask()
        lr = spec.space.suggest(t)["lr"]
        if constrained:
            t.set_constraint("out_of_memory", 1.0 if lr > 3e-3 else -1.0)
        study.tell(t, -lr)
        late += i >= 20 and lr > 3e-3
    return late


def test_tpe_learns_to_avoid_an_infeasible_region():
    free, steered = late_infeasible(constrained=False), late_infeasible(constrained=True)
    assert free >= 18  # the chase the constraint must stop
    assert steered <= 0.6 * free, (steered, free)


def test_auto_choice():
    two = {"val_loss": "minimize", "tokens_per_s": "maximize"}
    assert resolve_sampler_name(spec_for("auto")) == "gp"
    assert resolve_sampler_name(spec_for("auto", objectives=two)) == "gp"  # categorical ok too
    conditional = {"params": {
        "decay": {"type": "categorical", "choices": ["cosine", "wsd"]},
        "decay_fraction": {"type": "float", "low": 0.1, "high": 0.3,
                           "when": {"decay": ["wsd"]}}}}
    assert resolve_sampler_name(spec_for("auto", space=conditional)) == "random"
    assert resolve_sampler_name(spec_for("auto", n=500, objectives=two)) == "nsga2"
    assert resolve_sampler_name(spec_for("auto", n=500)) == "tpe"


def test_default_pruning_is_none_and_asha_is_opt_in():
    """ASHA lost to no pruning on the replays for one objective and for two (RESULTS.md)."""
    assert spec_for("auto").pruning.scheduler == "none"
    two = spec_for("auto", objectives={"val_loss": "minimize", "tokens_per_s": "maximize"})
    assert two.pruning.scheduler == "none"
    asked = spec_from_dict({"study": {"name": "s"}, "pruning": {"scheduler": "asha"},
                            "space": {"params": {"lr": {"type": "float", "low": 1e-4,
                                                        "high": 1e-1, "log": True}}}})
    assert asked.pruning.scheduler == "asha"
    assert spec_for("auto").study.sampler == "auto"


def random_prefix(spec, n: int = 14) -> int:
    """How many of the sampler's first ``n`` proposals are the seeded random sampler's."""
    def proposals(sampler):
        study = optuna.create_study(sampler=sampler)
        out = []
        for _ in range(n):
            t = study.ask()
            lr = spec.space.suggest(t)["lr"]
            study.tell(t, abs(lr - 3e-3))
            out.append(lr)
        return out

    mine = proposals(make_sampler(spec))
    rand = proposals(optuna.samplers.RandomSampler(seed=spec.study.seed))
    return next((i for i, (a, b) in enumerate(zip(mine, rand, strict=True)) if a != b), n)


def with_startup(sampler: str, startup, n: int = 30):
    spec = spec_for(sampler, n=n)
    study = {**spec.to_dict()["study"], "startup_trials": startup}
    return spec_from_dict({**spec.to_dict(), "study": study})


MODEL_SAMPLERS = ["tpe"] + (["gp"] if "gp" in SAMPLERS else [])


@pytest.mark.parametrize(("sampler", "n_trials", "expected"), [
    ("tpe", 30, 10), ("tpe", 40, 10), ("tpe", 9, 3), ("tpe", 4, 2),
    *[("gp", n, k) for n, k in ((40, 3), (12, 3), (9, 3), (8, 2), (4, 2)) if "gp" in SAMPLERS],
    *[("auto", n, k) for n, k in ((40, 3), (4, 2)) if "gp" in SAMPLERS]])
def test_default_random_start_is_a_third_of_the_study_capped_at_10_for_tpe_3_for_gp(
        sampler, n_trials, expected):
    """A third of the study, at least 2; at most 10 for TPE, at most 3 for GP (measured in
    benchmarks/RESULTS.md, "Search efficiency")."""
    spec = spec_for(sampler, n=n_trials)
    assert spec.study.startup_trials == "auto"
    assert startup_trials(spec) == expected
    assert random_prefix(spec) == expected


@pytest.mark.parametrize("sampler", MODEL_SAMPLERS)
@pytest.mark.parametrize("startup", [1, 3, 12])
def test_explicit_startup_trials_is_honoured(sampler, startup):
    spec = with_startup(sampler, startup)
    assert startup_trials(spec) == startup
    assert random_prefix(spec) == startup
    assert spec_from_dict(spec.to_dict()) == spec  # stored specs keep it


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "many", "Auto"])
def test_bad_startup_trials_is_rejected_naming_the_field(bad):
    with pytest.raises(ValueError, match=r"study\.startup_trials") as e:
        with_startup("gp" if "gp" in SAMPLERS else "tpe", bad)
    assert repr(bad) in str(e.value)


@pytest.mark.parametrize("sampler", [*REGISTERED, AUTO])
def test_a_resumed_sampler_does_not_replay_the_first_drivers_proposals(sampler):
    """A second driver joining a study with 3 trials must not propose those 3 points again,
    while a fresh study with the same seed keeps proposing the same points."""
    spec = spec_for(sampler)
    study = optuna.create_study(sampler=make_sampler(spec))
    first = []
    for _ in range(3):
        t = study.ask()
        first.append(spec.space.suggest(t)["lr"])
        study.tell(t, abs(first[-1] - 3e-3))
    resumed = optuna.create_study(sampler=make_sampler(spec, n_existing=3))
    resumed.add_trials(study.trials)
    later = [spec.space.suggest(resumed.ask())["lr"] for _ in range(3)]
    assert not set(later) & set(first)
    fresh = optuna.create_study(sampler=make_sampler(spec))
    assert spec.space.suggest(fresh.ask())["lr"] == first[0]
