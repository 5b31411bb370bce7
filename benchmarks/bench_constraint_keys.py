"""What the samplers see if a trial's constraints were also stored in Optuna 4's list form.

    python benchmarks/bench_constraint_keys.py

plain optuna-dashboard reads a trial's constraints from the ``constraints`` list of Optuna < 5;
Optuna 5 writes one ``constraints:<name>`` key per constraint and reads both forms. This runs
the same 16-trial, two-constraint study (seed 0) twice per sampler, once as moetune stores
trials (the per-name keys) and once with the list written beside them, and prints how many
constraints the sampler sees per trial and how many of its proposals differ.
"""

from __future__ import annotations

import warnings

import optuna


def proposals(sampler: optuna.samplers.BaseSampler, *, with_list: bool,
              n: int = 16) -> tuple[list[tuple[float, float]], int]:
    study = optuna.create_study(sampler=sampler, directions=["minimize"])
    points = []
    for _ in range(n):
        t = study.ask()
        x, y = t.suggest_float("x", 0.0, 1.0), t.suggest_float("y", 0.0, 1.0)
        limits = [x - 0.6, y - 0.7]  # feasible iff x <= 0.6 and y <= 0.7
        t.set_constraint("a", limits[0])
        t.set_constraint("b", limits[1])
        if with_list:
            study._storage.set_trial_system_attr(t._trial_id, "constraints", limits)
        study.tell(t, (x - 0.8) ** 2 + (y - 0.9) ** 2)
        points.append((x, y))
    return points, len(study.trials[-1].constraints)


def main() -> None:
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    for name, cls in (("GPSampler", optuna.samplers.GPSampler),
                      ("TPESampler", optuna.samplers.TPESampler)):
        keys, n_keys = proposals(cls(seed=0), with_list=False)
        both, n_both = proposals(cls(seed=0), with_list=True)
        differ = [i for i, (p, q) in enumerate(zip(keys, both, strict=True)) if p != q]
        print(f"{name}: constraints per trial {n_keys} (keys) vs {n_both} (keys + list); "
              f"{len(differ)} of {len(keys)} proposals differ"
              + (f", from trial {differ[0]}" if differ else ""))


if __name__ == "__main__":
    main()
