"""Synthetic moetune studies written exactly as `tuner.study.store.records` says, for the
report tests.

A plain module (not conftest.py) so that `from synthetic_studies import ...` cannot pick up
another package's conftest.
"""

from __future__ import annotations

import math
import random
import warnings

import optuna

from tuner.study.store import records

DIST = {
    "lr": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True),
    "warmup_fraction": optuna.distributions.FloatDistribution(0.0, 0.2),
    "precision": optuna.distributions.CategoricalDistribution(["bf16", "fp8"]),
    "batch_end": optuna.distributions.CategoricalDistribution([4, 8, 16, 32]),
}
OBJECTIVES = [["val_loss", "minimize"], ["peak_memory_gb", "minimize"]]
MEMORY_LIMIT = 4.0


def metrics(*, val_loss: float, memory_gb: float, precision: str, seed: int = 0,
            max_vio_batch: float = 0.3) -> dict:
    """A TrainResult.to_dict() minus curves, as the runner stores it."""
    return {
        "val_loss": val_loss if math.isfinite(val_loss) else str(val_loss),
        "tokens_trained": 50_000, "token_budget": 50_000, "steps": 40, "tokens_per_s": 9000.0,
        "train_time_s": 5.5, "peak_memory_bytes": int(memory_gb * 1024**3),
        "peak_memory_method": "cpu_accounting", "activation_bytes": 1000,
        "max_vio_batch": max_vio_batch, "max_vio_val": 0.2, "loss_spikes": 1,
        "loss_spike_steps": [7], "grad_norm_mean": 0.5,
        "grad_norm_max": 2.0, "diverged": not math.isfinite(val_loss), "diverged_step": None,
        "stopped_early": False, "precision": precision,
        "fp8_emulated": True if precision == "fp8" else None, "seed": seed,
        "corpus_hash": "abc", "n_params": 10, "n_active_params": 5, "environment": {},
    }


def add(study: optuna.Study, *, state: str = "complete", values=None, params=None,
        constraints=None, reason: str | None = None, val_loss: float | None = None,
        memory_gb: float = 1.0, curve=None, recipe_extra=None, trained: bool = False,
        timing: dict | None = None, max_vio_batch: float = 0.3) -> None:
    """Add one trial as the runner would record it (`state`: complete/infeasible/pruned/fail).

    ``trained``: store the full recipe and model args, as a trial that finished training has
    them (what export needs)."""
    params = params or {"lr": 1e-3, "warmup_fraction": 0.05, "precision": "bf16"}
    optuna_state = {"complete": "COMPLETE", "infeasible": "COMPLETE", "pruned": "PRUNED",
                    "fail": "FAIL", "running": "RUNNING"}[state]
    recipe = {"lr": params["lr"], "warmup_fraction": params["warmup_fraction"],
              "precision": params["precision"], "seed": 0, **(recipe_extra or {})}
    if trained:
        from trainers import Recipe, preset

        recipe = Recipe.from_dict(recipe).to_dict()
    attrs = {records.RECIPE: recipe, records.SEED: 0, records.OUTCOME: state}
    if trained:
        attrs[records.MODEL_ARGS] = preset("debug").to_dict()
    if reason:
        attrs[records.REASON] = reason
    if timing:
        attrs[records.TIMING] = timing
    if state != "fail":
        loss = val_loss if val_loss is not None else (values[0] if values else 3.0)
        attrs[records.METRICS] = metrics(val_loss=loss, memory_gb=memory_gb,
                                         precision=params["precision"],
                                         max_vio_batch=max_vio_batch)
        attrs[records.EVAL_CURVE] = curve or [[10_000 * k, 5.0 - 0.4 * k] for k in range(1, 6)]
    study.add_trial(optuna.trial.create_trial(
        state=getattr(optuna.trial.TrialState, optuna_state),
        values=values if optuna_state == "COMPLETE" else None,
        params=params, distributions={k: DIST[k] for k in params}, user_attrs=attrs,
        system_attrs={f"constraints:{k}": v for k, v in (constraints or {}).items()}))


def new_study(name: str = "synthetic", objectives=OBJECTIVES, storage=None) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=name, storage=storage,
                                directions=[d for _, d in objectives])
    with warnings.catch_warnings():  # experimental API warning; the runner sets them too
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names([n for n, _ in objectives])
    study.set_user_attr(records.OBJECTIVES, objectives)
    study.set_user_attr(records.CONSTRAINTS, {"max_peak_memory_gb": MEMORY_LIMIT})
    return study


def random_study(n: int = 40, seed: int = 0, name: str = "random",
                 trained: bool = False) -> optuna.Study:
    """A mixed study: feasible, infeasible (memory), pruned and failed trials, ties included."""
    rng = random.Random(seed)
    study = new_study(name)
    for i in range(n):
        params = {"lr": 10 ** rng.uniform(-4, -2), "warmup_fraction": rng.uniform(0, 0.2),
                  "precision": rng.choice(["bf16", "fp8"])}
        # Coarse values make ties and duplicated points, the cases sorting gets wrong.
        loss, mem = round(rng.uniform(2.5, 4.0), 1), round(rng.uniform(0.5, 6.0), 1)
        roll = rng.random()
        if roll < 0.1:
            add(study, state="fail", params=params, reason="out of memory")
        elif roll < 0.2:
            add(study, state="pruned", params=params,
                reason=f"pruned by ASHA at {10_000 * (i % 3 + 1)} tokens")
        else:
            over = mem - MEMORY_LIMIT
            add(study, state="infeasible" if over > 0 else "complete", values=[loss, mem],
                params=params, memory_gb=mem, constraints={"max_peak_memory_gb": over},
                trained=trained,
                reason=f"constraint max_peak_memory_gb: {mem} > {MEMORY_LIMIT}"
                if over > 0 else None)
    return study
