"""Run-to-run noise of val_loss, measured at the end of a study, and the tie rule that uses it.

With ``[study] noise_repeats = R`` (0, the default, measures nothing), once a study counts its
``n_trials`` the driver trains the ``noise_top`` feasible trials of lowest val_loss again, each
with R other seeds (the study's seed + 1 … + R), and stores the pooled standard deviation of
val_loss over those groups as the study attribute `records.NOISE`::

    {"sd": 0.012, "n": 6, "how": "2 recipe(s) x 3 seeds, pooled sd", "trials": [3, 7],
     "runs": [{"trial": 3, "seed": 1, "val_loss": 2.871}, ...]}

``n`` counts the runs behind ``sd``, the trials' own included. A run that diverges or raises is
kept in ``runs`` (val_loss "nan"/"inf", and ``error`` for an exception) and left out of ``sd``.

The re-trainings run in the driver's process, one after another, with the trainer the study
uses and the trial's thread count (``resources.cpus_per_trial``), after Ray Tune's trials have
ended: nothing else of the study runs on those cores then. They are not Optuna trials, so they
never count toward ``n_trials``, are never seen by the sampler and appear in no ranking. A
resumed study measures again only when its top trials changed.

`tied` is the rule reports use: a difference in val_loss no larger than the measured sd is a tie.

    >>> pooled_sd([[2.0, 2.02, 1.98], [3.0, 3.02, 2.98]])
    0.02
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from trainers import ModelArgs, Recipe, load_corpus
from trainers.result import json_safe, to_float
from tuner.study import records
from tuner.study.spec import StudySpec, max_corpus_bytes
from tuner.study.trial_record import TrialRecord, trial_records

Log = Callable[[str], None]


def pooled_sd(groups: Sequence[Sequence[float]]) -> float:
    """Pooled standard deviation of ``groups`` (each: val_loss of one recipe over seeds):
    sqrt(Σ_g Σ_i (x_gi − mean_g)² / Σ_g (n_g − 1)). Non-finite values are left out; NaN when
    no group keeps two values."""
    squares, dof = 0.0, 0
    for group in groups:
        xs = [x for x in group if math.isfinite(x)]
        if len(xs) < 2:
            continue
        mean = sum(xs) / len(xs)
        squares += sum((x - mean) ** 2 for x in xs)
        dof += len(xs) - 1
    return round(math.sqrt(squares / dof), 12) if dof else math.nan


def noise_sd(study_user_attrs: Mapping[str, Any]) -> float | None:
    """The measured sd of val_loss stored on a study, None when it was not measured."""
    noise = study_user_attrs.get(records.NOISE) or {}
    sd = noise.get("sd")
    return float(sd) if isinstance(sd, int | float) and math.isfinite(sd) else None


def tied(a: float, b: float, sd: float | None) -> bool:
    """Whether val_loss ``a`` and ``b`` are tied: their difference is within the noise ``sd``
    (never, when the noise was not measured)."""
    # (1 + 1e-9): a difference of exactly sd stays a tie after float rounding (2.0 - 1.98)
    return (sd is not None and math.isfinite(a) and math.isfinite(b)
            and abs(a - b) <= sd * (1 + 1e-9))


def top_trials(recs: Sequence[TrialRecord], k: int) -> list[TrialRecord]:
    """The ``k`` feasible, trained trials of lowest val_loss (ties by trial number)."""
    ok = [r for r in recs if r.feasible and r.trained and math.isfinite(_loss(r))]
    return sorted(ok, key=lambda r: (_loss(r), r.number))[:k]


def measure_noise(study: Any, spec: StudySpec, *, trainer: Callable[..., Any],
                  should_stop: Callable[[], bool] = lambda: False,
                  log: Log | None = None) -> dict[str, Any] | None:
    """Re-train the study's top trials with other seeds and store the spread as `records.NOISE`.

    Does nothing (returns the stored value, or None) when ``spec.study.noise_repeats`` is 0, when
    the stored measurement covers the same top trials, or when the study has no feasible trial.
    ``should_stop`` is polled before each run; once it is true nothing is stored.

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
    runs = _retrain(top, spec, trainer=trainer, should_stop=should_stop, log=log)
    if runs is None:
        return None
    groups = [[_loss(r)] + [to_float(x["val_loss"]) for x in runs if x["trial"] == r.number]
              for r in top]
    sd = pooled_sd(groups)
    if not math.isfinite(sd):
        return None
    noise = {"sd": sd, "n": sum(len(g) for g in groups),
             "how": f"{len(top)} recipe(s) x {1 + s.noise_repeats} seeds, pooled sd",
             "trials": [r.number for r in top], "runs": runs}
    study.set_user_attr(records.NOISE, noise)
    return noise


def _retrain(top: Sequence[TrialRecord], spec: StudySpec, *, trainer: Callable[..., Any],
             should_stop: Callable[[], bool], log: Log | None) -> list[dict[str, Any]] | None:
    """One run per (trial, other seed); None when stopped before the last."""
    say = log or (lambda line: None)
    data = load_corpus(spec.data.corpus, vocab_size=spec.data.vocab_size or None,
                       max_bytes=max_corpus_bytes(spec.data))
    device = "cuda" if spec.resources.gpus_per_trial > 0 and torch.cuda.is_available() else "cpu"
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, int(spec.resources.cpus_per_trial)))
    runs = []
    try:
        for r in top:
            first = spec.study.seed + 1
            for seed in range(first, first + spec.study.noise_repeats):
                if should_stop():
                    return None
                runs.append(_one_run(r, seed, spec, trainer=trainer, data=data, device=device))
                say(f"noise: trial {r.number} with seed {seed}: val_loss {runs[-1]['val_loss']}")
    finally:
        torch.set_num_threads(before)
    return runs


def _one_run(r: TrialRecord, seed: int, spec: StudySpec, *, trainer: Callable[..., Any],
             data: Any, device: str) -> dict[str, Any]:
    """One re-training; an exception is recorded on the run (val_loss NaN), not raised: the
    study's trials are done, and one failed re-run leaves the others' spread usable."""
    run: dict[str, Any] = {"trial": r.number, "seed": seed}
    try:
        result = trainer(ModelArgs.from_dict(r.model_args_dict), Recipe.from_dict(r.recipe_dict),
                         data=data, token_budget=spec.budget.tokens_per_trial, seed=seed,
                         eval_every_tokens=spec.budget.eval_every_tokens, device=device)
    except Exception as e:  # noqa: BLE001 - recorded on the run below
        return run | {"val_loss": "nan", "error": f"{type(e).__name__}: {e}"[:300]}
    return run | {"val_loss": json_safe(float(result.val_loss))}


def _loss(r: TrialRecord) -> float:
    return to_float(r.metrics.get("val_loss"))
