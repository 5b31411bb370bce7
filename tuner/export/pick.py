"""Choose the trial to export from a study in storage: best loss, the Pareto knee, or trial N.

Reads trials as `tuner.study.results.trial_record` decodes them. Only trials that finished training
are candidates (state COMPLETE with a recipe and model args). ``best-loss`` and ``knee`` consider
feasible trials only (the one rule, `tuner.study.results.trial_record.is_feasible`); ``trial N``
takes any such trial and says when it is infeasible; a warm-start trial (measured by another study,
`tuner.study.run.warm_start`) is never a candidate: export it from that study. The knee is
`tuner.study.results.ranking`'s: without limits it is the trial the report marks as the knee. Its
``how`` names the trials tied with it within the measured noise
(`tuner.study.results.noise.knee_ties`), or says that cannot be judged; the pick itself stays the
knee.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import optuna

from trainers.result import to_float
from tuner.modeling.hardware import GIB
from tuner.study.results.noise import knee_ties, noise_sd
from tuner.study.results.ranking import knee, pareto_front
from tuner.study.results.trial_record import TrialRecord, study_objectives, trial_records

PICKS = ("best-loss", "knee", "trial")


@dataclass(frozen=True, kw_only=True)
class Pick:
    """What to export. ``trial`` is required for kind ``trial``; limits filter candidates by
    the proxy's *measured* metrics (peak memory in GiB, tokens per second)."""

    kind: str = "best-loss"
    trial: int | None = None
    max_memory_gb: float | None = None
    min_tokens_per_s: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in PICKS:
            raise ValueError(f"pick: must be one of {PICKS}, but got pick={self.kind!r}.")
        if self.kind == "trial" and self.trial is None:
            raise ValueError("pick: 'trial' needs a trial number (--pick trial N).")


@dataclass(frozen=True, kw_only=True)
class Picked:
    record: TrialRecord
    how: str  # one sentence: which rule chose it among how many candidates


def finished_trials(study: optuna.Study) -> list[TrialRecord]:
    """Trials that finished training with a recipe and model args, in trial-number order."""
    return [r for r in trial_records(study) if r.trained]


def within_limits(r: TrialRecord, pick: Pick) -> bool:
    if pick.max_memory_gb is not None:
        mem = to_float(r.metrics.get("peak_memory_bytes"), math.inf) / GIB
        if not mem <= pick.max_memory_gb:
            return False
    if pick.min_tokens_per_s is not None:
        if not to_float(r.metrics.get("tokens_per_s"), 0.0) >= pick.min_tokens_per_s:
            return False
    return True


def pick_trial(study: optuna.Study, pick: Pick) -> Picked:
    """Apply ``pick`` to ``study``.

    Raises:
        LookupError: no trial qualifies (the message says why).
    """
    done = finished_trials(study)
    if pick.kind == "trial":
        match = [r for r in done if r.number == pick.trial]
        if not match:
            raise LookupError(f"trial {pick.trial}: not a finished trial of study "
                              f"{study.study_name!r}; finished: {[r.number for r in done]}.")
        r = match[0]
        if r.warm_start:
            raise LookupError(f"trial {pick.trial}: a warm-start trial of study "
                              f"{study.study_name!r}, measured by study "
                              f"{r.origin.partition(':')[2]!r} at its own proxy and budget; "
                              "export it from that study.")
        state = "feasible" if r.feasible else "INFEASIBLE (a constraint is violated)"
        return Picked(record=r, how=f"trial {r.number} as requested ({state})")
    feasible = [r for r in done if r.feasible]
    objectives = study_objectives(study)
    if pick.kind == "best-loss":
        pool = [r for r in feasible if within_limits(r, pick)]
        pool = [r for r in pool if math.isfinite(r.metric("val_loss"))]
        if not pool:
            raise LookupError(_none_left(study, done, feasible, pick))
        r = min(pool, key=lambda x: (x.metric("val_loss"), x.number))
        return Picked(record=r, how=f"lowest val_loss among {len(pool)} feasible trials "
                                    f"within limits")
    front = [r for r in pareto_front(feasible, objectives) if within_limits(r, pick)] \
        if feasible else []
    if not front:
        raise LookupError(_none_left(study, done, feasible, pick))
    r = knee(front, objectives)
    ties = knee_ties([x for x in feasible if within_limits(x, pick)], objectives,
                     noise_sd(study.user_attrs), front=front)
    said = ties.sentence() if ties is not None else ""
    said = f"; {said[:1].lower()}{said[1:]}" if said else ""
    return Picked(record=r, how=f"knee of the Pareto front ({len(front)} points within limits "
                                f"over {[o.name for o in objectives]}){said}")


def _none_left(study: optuna.Study, done: list[TrialRecord], feasible: list[TrialRecord],
               pick: Pick) -> str:
    return (f"study {study.study_name!r}: no trial to export ({len(done)} finished, "
            f"{len(feasible)} feasible, limits max_memory_gb={pick.max_memory_gb}, "
            f"min_tokens_per_s={pick.min_tokens_per_s}).")
