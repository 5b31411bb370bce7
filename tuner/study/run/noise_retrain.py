"""Noise re-trainings: a study's top trials trained again with other seeds, their spread stored
as `records.NOISE` (the numbers and the tie rules that read them: `tuner.study.results.noise`).

The re-trainings run after Ray Tune's trials have ended, with the trainer the study uses and
the trial's resources (``resources.cpus_per_trial`` threads, ``gpus_per_trial``): in a study
(``on_ray``) as Ray tasks, up to ``max_concurrent`` at once as the trials ran, so the cores the
trials used stay busy; called alone, in this process one after another. Each (trial, seed) run
is the same `Training`, run by `tuner.study.trial.training.run_training` either way; a Ray task
receives that `Training` (no storage URL in it), the trial's number and the trainer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from trainers.result import json_safe, to_float
from tuner.study.results.noise import Log, loss_of, pooled_sd, top_trials
from tuner.study.results.trial_record import TrialRecord, trial_records
from tuner.study.specs.spec import StudySpec
from tuner.study.store import records
from tuner.study.trial.training import Trained, Training, run_training, study_training


def measure_noise(study: Any, spec: StudySpec, *, trainer: Callable[..., Any],
                  should_stop: Callable[[], bool] = lambda: False,
                  log: Log | None = None, on_ray: bool = False) -> dict[str, Any] | None:
    """Re-train the study's top trials with other seeds and store the spread as `records.NOISE`.

    Does nothing (returns the stored value, or None) when ``spec.study.noise_repeats`` is 0, when
    the stored measurement covers the same top trials, or when the study has no feasible trial.
    ``should_stop`` is polled before each run (``on_ray``: while the runs are in flight, which
    it then cancels); once it is true nothing is stored. ``on_ray``: run them as Ray tasks, up
    to ``study.max_concurrent`` at once, on the Ray this process is connected to.

    Returns:
        The stored NOISE dict, or None when nothing was measured.
    """
    s = spec.study
    if s.noise_repeats <= 0:
        return None
    top = top_trials(trial_records(study), s.noise_top)
    stored: dict[str, Any] | None = study.user_attrs.get(records.NOISE)
    if not top or (stored and stored.get("trials") == [r.number for r in top]):
        return stored
    jobs = [(r, seed) for r in top
            for seed in range(s.seed + 1, s.seed + 1 + s.noise_repeats)]
    if log is not None:
        log(f"{spec.name}: re-training its {len(top)} best trial(s) with {s.noise_repeats} other "
            f"seed(s) each ({len(jobs)} runs of {spec.budget.tokens_per_trial:,} tokens) to "
            "measure the run-to-run noise")
    retrain = _retrain_on_ray if on_ray and s.max_concurrent > 1 and len(jobs) > 1 else _retrain
    runs = retrain(jobs, spec, trainer=trainer, should_stop=should_stop, log=log)
    if runs is None:
        return None
    groups = [[loss_of(r)] + [to_float(x["val_loss"]) for x in runs if x["trial"] == r.number]
              for r in top]
    sd = pooled_sd(groups)
    if not math.isfinite(sd):
        return None
    noise = {"sd": sd, "n": sum(len(g) for g in groups),
             "how": f"{len(top)} recipe(s) x {1 + s.noise_repeats} seeds, pooled sd",
             "trials": [r.number for r in top], "runs": runs}
    study.set_user_attr(records.NOISE, noise)
    return noise


Job = tuple[TrialRecord, int]  # a top trial and the seed it is re-trained with


def _retrain(jobs: Sequence[Job], spec: StudySpec, *, trainer: Callable[..., Any],
             should_stop: Callable[[], bool], log: Log | None) -> list[dict[str, Any]] | None:
    """The runs in this process, one after another; None when stopped before the last."""
    say = log or (lambda line: None)
    runs = []
    for r, seed in jobs:
        if should_stop():
            return None
        runs.append(retrain_run(r.number, training_of(r, seed, spec), trainer))
        say(_said(runs[-1], len(runs), len(jobs), spec.name))
    return runs


def _retrain_on_ray(jobs: Sequence[Job], spec: StudySpec, *, trainer: Callable[..., Any],
                    should_stop: Callable[[], bool],
                    log: Log | None) -> list[dict[str, Any]] | None:
    """The runs as Ray tasks with a trial's resources, at most ``max_concurrent`` in flight;
    in ``jobs``' order, as `_retrain` gives them. None when stopped before the last (the runs
    in flight are cancelled). A run whose worker dies (killed for memory, say) is recorded
    like a run that raised."""
    import ray  # only here: the tie rules above are imported by light commands

    say = log or (lambda line: None)
    res = spec.resources
    task = ray.remote(num_cpus=res.cpus_per_trial, num_gpus=res.gpus_per_trial,
                      max_retries=0)(retrain_run)
    todo = list(enumerate(jobs))
    flying: dict[Any, int] = {}
    runs: dict[int, dict[str, Any]] = {}
    try:
        while todo or flying:
            if should_stop():
                return None
            while todo and len(flying) < spec.study.max_concurrent:
                i, (r, seed) = todo.pop(0)
                flying[task.remote(r.number, training_of(r, seed, spec), trainer)] = i
            done, _ = ray.wait(list(flying), num_returns=1, timeout=1.0)
            for ref in done:
                i = flying.pop(ref)
                r, seed = jobs[i]
                try:
                    runs[i] = ray.get(ref)
                except Exception as e:  # noqa: BLE001 - the worker died: recorded on the run
                    runs[i] = {"trial": r.number, "seed": seed, "val_loss": "nan",
                               "error": f"{type(e).__name__}: {e}"[:300]}
                say(_said(runs[i], len(runs), len(jobs), spec.name))
    finally:
        for ref in flying:
            ray.cancel(ref, force=True)
    return [runs[i] for i in range(len(jobs))]


def training_of(r: TrialRecord, seed: int, spec: StudySpec) -> Training:
    """Trial ``r``'s recipe and model trained again with ``seed``, the study's budget, corpus
    and per-trial resources."""
    return study_training(spec, model_args=r.model_args_dict, recipe=r.recipe_dict, seed=seed)


def retrain_run(number: int, training: Training, trainer: Callable[..., Any]) -> dict[str, Any]:
    """One re-training of trial ``number`` (`run_training`), as a run: an exception is recorded
    on it (val_loss NaN), not raised: the study's trials are done, and one failed re-run leaves
    the others' spread usable."""
    return run_record(number, training.seed, run_training(training, trainer=trainer))


def run_record(number: int, seed: int, trained: Trained) -> dict[str, Any]:
    """The run as `records.NOISE` keeps it."""
    run: dict[str, Any] = {"trial": number, "seed": seed}
    if trained.status != "ok":
        return run | {"val_loss": "nan", "error": trained.error}
    return run | {"val_loss": json_safe(float(trained.result_or_raise().val_loss))}


def _said(run: dict[str, Any], k: int, n: int, name: str) -> str:
    """A progress line: the ``k``-th of ``n`` re-trainings of study ``name`` has ended."""
    loss = run["val_loss"]  # "nan" when the re-training failed
    return (f"{name}: re-training {k}/{n}: trial {run['trial']} with seed {run['seed']}: "
            f"val_loss {f'{loss:.4f}' if isinstance(loss, float) else loss}")
