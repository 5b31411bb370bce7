"""The operator's caps on a submitted spec (``moetune serve --max-trials`` and the others; 0 is
no cap), judged on what the study will actually train, before anything is created.

`trainings` is the most trainings a spec can run: every trial of every stage, and every noise
re-training (``[study] noise_repeats`` re-trains the ``noise_top`` best trials of each stage
that measures noise; `tuner.study.results.noise`):

    plain   n_trials + noise
    law     per budget: (law.trials or n_trials) trials (+1 on the held-out budget and on the
            held-out batch: each trains its predicted recipe first) + noise
    ladder  rung 0: n_trials; rung r: promoted + ladder.proposals, where promoted is at most
            every trial of rung r-1 when ties can promote more than the share (noise measured,
            or several objectives: `tuner.study.workflows.ladder.promote`), else
            max(1, ceil(promote * trials of rung r-1)); + noise on each rung (the top one only
            with ``top_noise``)

``--max-width`` caps the width (the model dim) of every training: a plain study's or a law's
proxy (its preset, or the proxy size a full config is shrunk to), a ladder's every rung.

A resume is judged on the trainings the study has made (`trainings_made`): every trial that
started, interrupted ones included (each was a trainer call; a resume runs it again), and every
stored noise re-training; it is refused when those and the most the resume can still run
(`trainings` less the trainings already counted toward their stage's target) pass the cap, so
cancel and resume cycles cannot multiply a study's trainings.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import optuna
from optuna.trial import TrialState

from tuner.study.results.trial_record import is_warm_start
from tuner.study.run.resume import counts_toward_target
from tuner.study.specs.proxy import proxy_width
from tuner.study.specs.spec import StudySpec
from tuner.study.store import records


class CapExceeded(ValueError):
    """A spec above an operator's cap; ``field`` names the spec field."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, kw_only=True)
class Caps:
    """The operator's caps (0: none)."""

    max_trials: int = 0  # trainings of any kind, counted by `trainings`
    max_tokens_per_trial: int = 0
    max_concurrent_trials: int = 0
    max_width: int = 0  # the model width (dim) of any training


def trainings(spec: StudySpec) -> int:
    """The most trainings ``spec`` can run (module docstring)."""
    s = spec.study
    if spec.law.on:
        law = spec.law
        per_budget = law.trials or s.n_trials
        # the held-out budget and the held-out batch each train their predicted recipe first
        predicted = {len(law.tokens) if law.held_out else None, law.held_out_batch_index}
        return sum(_with_noise(spec, per_budget + (1 if i in predicted else 0))
                   for i in range(len(law.budgets)))
    if spec.ladder.on:
        lad = spec.ladder
        ties = s.noise_repeats > 0 or len(spec.objectives) > 1
        n, total = s.n_trials, _with_noise(spec, s.n_trials)
        for rung in range(1, len(lad.widths)):
            promoted = n if ties else max(1, math.ceil(lad.promote * n))
            n = promoted + lad.proposals
            top_quiet = rung == len(lad.widths) - 1 and not lad.top_noise
            total += n if top_quiet else _with_noise(spec, n)
        return total
    return _with_noise(spec, s.n_trials)


def _trials_field(spec: StudySpec) -> str:
    """The field a refusal of ``--max-trials`` names."""
    return ("law.trials" if spec.law.on else "ladder.proposals" if spec.ladder.on
            else "study.n_trials")


def _with_noise(spec: StudySpec, n: int) -> int:
    """``n`` trials and the noise re-trainings of the stage they make up."""
    return n + min(spec.study.noise_top, n) * spec.study.noise_repeats


def check_caps(spec: StudySpec, caps: Caps) -> None:
    """Refuse ``spec`` when it is above a cap.

    Raises:
        CapExceeded: naming the field, the cap's flag, the cap and the value.
    """
    law = spec.law
    total = trainings(spec)
    if caps.max_trials and total > caps.max_trials:
        field = _trials_field(spec)
        raise CapExceeded(f"{field}: a study may train at most {caps.max_trials} times on "
                          f"this service (serve --max-trials; every trial of every budget or "
                          f"rung and every noise re-training counted), but this one trains up "
                          f"to {total}.", field)
    tokens = max(law.budgets) if law.on else spec.budget.tokens_per_trial
    for field, value, cap, flag in (
            ("law.tokens" if law.on else "budget.tokens_per_trial", tokens,
             caps.max_tokens_per_trial, "--max-tokens-per-trial"),
            ("study.max_concurrent", spec.study.max_concurrent, caps.max_concurrent_trials,
             "--max-concurrent-trials")):
        if cap and value > cap:
            raise CapExceeded(f"{field}: must be <= {cap} on this service (serve {flag}), but "
                              f"got {value}.", field)
    _check_width(spec, caps.max_width)


def _check_width(spec: StudySpec, cap: int) -> None:
    """``--max-width`` on every training's model width (`proxy.proxy_width`)."""
    width = proxy_width(spec)
    if not cap or width <= cap:
        return
    if spec.ladder.on:
        raise CapExceeded(f"ladder.widths: must be <= {cap} on this service (serve "
                          f"--max-width), but got {width}.", "ladder.widths")
    field = "model.preset" if spec.model.preset else "model.proxy"
    name = spec.model.preset or spec.model.proxy or "the default proxy"
    raise CapExceeded(f"{field}: a training's model width (dim) must be <= {cap} on this "
                      f"service (serve --max-width), but {name!r} trains at {width}.", field)


def trainings_made(stages: Iterable[optuna.Study]) -> tuple[int, int]:
    """(made, counted) over the studies of a run's stages: ``made`` every trial that started
    (any state but waiting, interrupted ones included; warm-start trials trained nothing here)
    and every stored noise re-training; ``counted`` those of them a resume does not run again
    (`resume.counts_toward_target`, and the stored noise)."""
    made = counted = 0
    for study in stages:
        noise = study.user_attrs.get(records.NOISE)
        runs = len(noise.get("runs", ())) if isinstance(noise, dict) else 0
        made, counted = made + runs, counted + runs
        for t in study.get_trials(deepcopy=False):
            if t.state == TrialState.WAITING or is_warm_start(t.user_attrs.get(records.ORIGIN)):
                continue
            made += 1
            counted += counts_toward_target(t)
    return made, counted


def check_resume_cap(spec: StudySpec, stages: Iterable[optuna.Study], caps: Caps) -> None:
    """Refuse to resume a study of ``spec`` (its stages' studies ``stages``) when the
    trainings it made and the most its resume can run pass ``--max-trials``.

    Raises:
        CapExceeded: naming the cap, the trainings made and those the resume could run.
    """
    if not caps.max_trials:
        return
    made, counted = trainings_made(stages)
    more = max(0, trainings(spec) - counted)
    if made + more > caps.max_trials:
        field = _trials_field(spec)
        raise CapExceeded(f"{field}: a study may train at most {caps.max_trials} times on this "
                          f"service (serve --max-trials; interrupted trainings counted, as each "
                          f"was a training), but {spec.name!r} has trained {made} times and a "
                          f"resume could train up to {more} more.", field)
