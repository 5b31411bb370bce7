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

``--max-width`` caps a ladder's widths (the model dim of its rungs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tuner.study.specs.spec import StudySpec


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
    max_width: int = 0  # a ladder rung's model width


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
        field = ("law.trials" if law.on else "ladder.proposals" if spec.ladder.on
                 else "study.n_trials")
        raise CapExceeded(f"{field}: a study may train at most {caps.max_trials} times on "
                          f"this service (serve --max-trials; every trial of every budget or "
                          f"rung and every noise re-training counted), but this one trains up "
                          f"to {total}.", field)
    tokens = max(law.budgets) if law.on else spec.budget.tokens_per_trial
    width = max(spec.ladder.widths) if spec.ladder.on else 0
    for field, value, cap, flag in (
            ("law.tokens" if law.on else "budget.tokens_per_trial", tokens,
             caps.max_tokens_per_trial, "--max-tokens-per-trial"),
            ("study.max_concurrent", spec.study.max_concurrent, caps.max_concurrent_trials,
             "--max-concurrent-trials"),
            ("ladder.widths", width, caps.max_width, "--max-width")):
        if cap and value > cap:
            raise CapExceeded(f"{field}: must be <= {cap} on this service (serve {flag}), but "
                              f"got {value}.", field)
