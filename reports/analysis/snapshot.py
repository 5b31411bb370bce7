"""A consistent snapshot of a study: every report artifact is built from one read of storage.

A study that is still running keeps changing while a report is written; reading the trials once
and building every file from that read keeps ranked.md, the plots and trials.csv in agreement,
and the snapshot says when it was taken and how many trials were still running.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import optuna
import pandas as pd

from reports.analysis.frame import records_frame
from tuner.study.results.noise import KneeTies, knee_ties, noise_sd, planned_repeats
from tuner.study.results.trial_record import (
    Objective,
    TrialRecord,
    study_objectives,
    trial_records,
)
from tuner.study.store import records

UNFINISHED = (optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING)


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """The trials of a study as read at `taken_at`, with the frame built from them."""

    study_name: str
    objectives: list[Objective]
    constraints: dict[str, float]
    trials: list[optuna.trial.FrozenTrial]
    records: list[TrialRecord]  # the same trials, decoded
    frame: pd.DataFrame
    taken_at: dt.datetime
    n_unfinished: int
    note: str | None
    study_user_attrs: dict

    @property
    def is_partial(self) -> bool:
        """True when the study was still running (or the caller said so) at `taken_at`."""
        return self.n_unfinished > 0 or self.note is not None

    def banner(self) -> str:
        """One sentence saying what this report is a snapshot of; empty for a finished study."""
        if not self.is_partial:
            return ""
        when = self.taken_at.strftime("%Y-%m-%d %H:%M:%S UTC")
        text = (f"Snapshot of a study still running, taken {when}: {self.n_unfinished} trial(s) "
                f"not finished yet; ranks and plots will change as trials complete.")
        return f"{text} {self.note}" if self.note else text

    @property
    def records_by_number(self) -> dict[int, TrialRecord]:
        return {r.number: r for r in self.records}

    @property
    def noise_sd(self) -> float | None:
        """The study's measured val_loss noise (`tuner.study.results.noise`), None when not
        measured."""
        return noise_sd(self.study_user_attrs)

    def knee_ties(self) -> KneeTies | None:
        """The knee and the trials tied with it within the noise (None: no feasible trial)."""
        return knee_ties(self.records, self.objectives, self.noise_sd,
                         planned=planned_repeats(self.study_user_attrs))


def take_snapshot(study: optuna.Study, *, note: str | None = None) -> Snapshot:
    """Read `study` once and build its frame."""
    trials = list(study.get_trials(deepcopy=True))
    limits = study.user_attrs.get(records.CONSTRAINTS) or {}
    objectives = study_objectives(study)
    recs = trial_records(study, trials=trials)
    return Snapshot(
        study_name=study.study_name,
        objectives=objectives,
        constraints={str(k): v for k, v in limits.items()},
        trials=trials,
        records=recs,
        frame=records_frame(recs, objectives, noise=noise_sd(study.user_attrs)),
        taken_at=dt.datetime.now(dt.UTC),
        n_unfinished=sum(t.state in UNFINISHED for t in trials),
        note=note,
        study_user_attrs=dict(study.user_attrs),
    )
