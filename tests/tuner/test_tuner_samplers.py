"""Each sampler learns from constraints told with trial.set_constraint (no Ray needed)."""

from __future__ import annotations

import importlib.util

import optuna
import pytest

from tuner.samplers import make_sampler, resolve_sampler_name
from tuner.spec import spec_from_dict

SAMPLERS = ["tpe", "nsga2", "random", "auto"]
if importlib.util.find_spec("scipy") is not None:
    SAMPLERS.append("gp")


def spec_for(sampler: str, *, n: int = 30, objectives=None, space=None):
    return spec_from_dict({
        "study": {"name": "s", "n_trials": n, "max_concurrent": 1, "sampler": sampler},
        "objectives": objectives or {"val_loss": "minimize"},
        "space": space or {"params": {"lr": {"type": "float", "low": 1e-4, "high": 1e-1,
                                             "log": True}}},
    })


@pytest.mark.parametrize("sampler", SAMPLERS)
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
    assert resolve_sampler_name(spec_for("auto", space=conditional)) == "tpe"
    assert resolve_sampler_name(spec_for("auto", n=500, objectives=two)) == "nsga2"
    assert resolve_sampler_name(spec_for("auto", n=500)) == "tpe"


def test_default_pruning_follows_the_objectives():
    """ASHA ranks by val_loss: with more objectives it would prune the fast end of the front."""
    assert spec_for("auto").pruning.scheduler == "asha"
    two = spec_for("auto", objectives={"val_loss": "minimize", "tokens_per_s": "maximize"})
    assert two.pruning.scheduler == "none"
    assert spec_for("auto").study.sampler == "auto"
