"""The service's view of the studies in its storage: who owns each, what state it is in, and the
progress, trials and front the API and the page show.

A study the service runs carries a SERVICE attribute (`tuner.study.store.records`):
``{"owner", "state", "submitted_at", "started_at", "ended_at", "error"}``. States:

    queued       waiting for a free slot (the queue is the set of queued studies, oldest first)
    starting     a driver actor is being started
    running      its driver runs trials
    stopping     cancel was asked; the driver is stopping its trials
    cancelled    stopped on request; `resume` queues it again
    finished     n_trials counted
    failed       the driver stopped on an error (``error`` says which; ``storage
                 unreachable`` when the driver lost the database); `resume` queues it again
    interrupted  the driver was lost too often (its Ray actor died); `resume` queues it again

The allowed moves are `TRANSITIONS`, written once: `set_state` refuses any other (a driver and
the scheduler that both think they own a study cannot overwrite each other's end state). A new
study enters the machine by `enqueue`. The storage is the truth: a restarted service reads these
back and carries on.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from trainers.result import is_usable
from tuner.app.requests.ladder_rungs import is_ladder_base, ladder_rungs
from tuner.app.requests.law_grid import is_law_base, law_grid
from tuner.study.results.noise import knee_ties, noise_sd, planned_repeats
from tuner.study.results.ranking import pareto_front, study_knee
from tuner.study.results.trial_record import Objective, TrialRecord, study_objectives, trial_record
from tuner.study.run.resume import counts_toward_target
from tuner.study.store import records

STATES = ("queued", "starting", "running", "stopping", "cancelled", "finished", "failed",
          "interrupted")
ACTIVE = ("starting", "running", "stopping")  # a driver holds the study
ENDED = ("cancelled", "finished", "failed", "interrupted")  # may be deleted or resumed
# state -> the states it may move to (who moves it: S scheduler, D driver, U a user's request)
TRANSITIONS: dict[str, tuple[str, ...]] = {
    "queued": ("starting", "cancelled"),  # S starts it; U cancels it
    # D runs it; U cancels; D fails; S queues it again when the driver was lost, or marks it
    # failed (storage unreachable) or interrupted (lost too often)
    "starting": ("running", "stopping", "failed", "queued", "interrupted"),
    "running": ("stopping", "finished", "cancelled", "interrupted", "failed", "queued"),
    "stopping": ("cancelled", "finished", "interrupted", "failed"),
    "cancelled": ("queued",),  # U resumes
    "failed": ("queued",),
    "interrupted": ("queued",),
    "finished": (),
}
STORAGE_UNREACHABLE = "storage unreachable"  # a failed study's error when its driver lost it


class TransitionError(ValueError):
    """A move `TRANSITIONS` does not allow (the study is left as it was)."""


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def service_record(study: optuna.Study) -> dict[str, Any]:
    """The SERVICE attribute, or a record saying the command line ran this study."""
    return _service_record(study.user_attrs)


def record_of(user_attrs: dict[str, Any]) -> dict[str, Any]:
    """`service_record` from a study's user attributes (a listing's, without loading it)."""
    return _service_record(user_attrs)


# what state "external" with no owner means, said wherever a study is shown to a user
EXTERNAL_WORDS = ("run by `moetune submit` without --server: the service neither queued nor "
                  "runs it, so it has no owner here")


def _service_record(attrs: dict[str, Any]) -> dict[str, Any]:
    rec = attrs.get(records.SERVICE)
    return dict(rec) if rec else {"owner": "", "state": "external", "submitted_at": ""}


def enqueue(study: optuna.Study, owner: str) -> None:
    """A study just created by the service enters the machine, queued for ``owner``."""
    assert records.SERVICE not in study.user_attrs, study.study_name
    study.set_user_attr(records.SERVICE, {"owner": owner, "state": "queued",
                                          "submitted_at": now(), "error": ""})


def set_state(study: optuna.Study, state: str, **fields: Any) -> None:
    """Move the study to ``state``, stamping the time it entered it.

    Raises:
        TransitionError: `TRANSITIONS` has no move from the study's state to ``state`` (a
            study run from the command line, ``external``, has none at all).
    """
    assert state in STATES, state
    rec = service_record(study)
    if state not in TRANSITIONS.get(rec["state"], ()):
        raise TransitionError(f"state: {study.study_name!r} may not move from "
                              f"{rec['state']} to {state}.")
    rec = rec | fields | {"state": state}
    if state == "finished" and "error" not in fields:
        rec["error"] = ""  # an earlier "driver was lost" is history once the study finished
    stamp = {"starting": "started_at", "cancelled": "ended_at", "finished": "ended_at",
             "failed": "ended_at", "interrupted": "ended_at"}.get(state)
    if stamp:
        rec[stamp] = now()
    study.set_user_attr(records.SERVICE, rec)


@dataclass(frozen=True)
class _Read:
    """What a view shows, read from the storage once: the study's attributes and its trials
    (a view looks at them many times; each look at ``study.user_attrs`` or its trials would be
    another database read)."""

    name: str
    attrs: dict[str, Any]
    trials: list[FrozenTrial]
    recs: list[TrialRecord]
    objectives: list[Objective]

    @classmethod
    def of(cls, study: optuna.Study) -> _Read:
        trials = study.get_trials(deepcopy=False)
        objectives = study_objectives(study)
        recs = [trial_record(t, objectives) for t in sorted(trials, key=lambda t: t.number)]
        return cls(name=study.study_name, attrs=study.user_attrs, trials=trials, recs=recs,
                   objectives=objectives)


def progress(study: optuna.Study) -> dict[str, Any]:
    """Counts and the best trial: what the list, the stream and the page show."""
    return _progress(_Read.of(study))


def _progress(read: _Read) -> dict[str, Any]:
    spec = read.attrs.get(records.SPEC) or {}
    first = read.objectives[0]
    feasible = [r for r in read.recs if r.feasible]
    best = None
    if feasible:
        pick = min if first.direction == "minimize" else max
        b = pick(feasible, key=lambda r: r.values[first.name])
        best = {"trial": b.number, "values": _finite(b.values)}
    outcomes: dict[str, int] = {}
    for r in read.recs:
        if r.state in (TrialState.RUNNING, TrialState.WAITING):
            continue
        outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
    return {"done": sum(counts_toward_target(t) for t in read.trials),
            "total": int(spec.get("study", {}).get("n_trials", 0)),
            "running": sum(t.state == TrialState.RUNNING for t in read.trials),
            "outcomes": outcomes, "best": best}


def summary(study: optuna.Study) -> dict[str, Any]:
    """One entry of the study list."""
    return _summary(_Read.of(study))


def _summary(read: _Read) -> dict[str, Any]:
    rec = _service_record(read.attrs)
    return {"name": read.name, "owner": rec.get("owner", ""), "state": rec["state"],
            "submitted_at": rec.get("submitted_at", ""), "error": rec.get("error", ""),
            "progress": _progress(read)}


def detail(study: optuna.Study) -> dict[str, Any]:
    """Everything the study page shows: summary, objectives, trials, front, knee, curves."""
    read = _Read.of(study)
    recs, objectives = read.recs, read.objectives
    front = pareto_front([r for r in recs if r.feasible], objectives)
    knee = study_knee(recs, objectives)
    return _summary(read) | {
        "objectives": [{"name": o.name, "direction": o.direction} for o in objectives],
        "spec": read.attrs.get(records.SPEC),
        "trials": [{"number": r.number, "outcome": r.outcome, "feasible": r.feasible,
                    "values": _finite(r.values), "params": r.params, "reason": r.reason,
                    "curve": [[t, v] for t, v in r.eval_curve if is_usable(v)]}
                   for r in recs],
        "front": [r.number for r in front],
        "knee": knee.number if knee is not None else None,
        "knee_ties": _ties(read),
        # a law study's page shows its every budget (tuner.app.requests.law_grid)
        "law": law_grid(study, driven=_driven(read.attrs)) if is_law_base(read.attrs) else None,
        "ladder": ladder_rungs(study) if is_ladder_base(read.attrs) else None,
    }


def _driven(attrs: dict[str, Any]) -> bool | None:
    """Whether a driver runs the study now; None for one run from the command line (unknown)."""
    state = _service_record(attrs)["state"]
    return None if state == "external" else state in ACTIVE


def _ties(read: _Read) -> dict[str, Any] | None:
    """The trials tied with the knee within the measured noise, and the reports' sentence on it
    (`tuner.study.results.noise.knee_ties`: the rule ranked.md, report.html and ``export --pick
    knee``
    use); None without a feasible trial."""
    ties = knee_ties(read.recs, read.objectives, noise_sd(read.attrs),
                     planned=planned_repeats(read.attrs))
    if ties is None:
        return None
    return {"knee": ties.knee, "tied": list(ties.tied), "judged": ties.judged,
            "sentence": ties.sentence()}


def _finite(values: dict[str, float]) -> dict[str, float | None]:
    """JSON has no inf/NaN: they become null."""
    return {k: (v if math.isfinite(v) else None) for k, v in values.items()}
