"""A ladder's rungs on its service page: every width, how far its trials have come, its best.

A ladder is its bottom rung (``NAME``) plus one study per wider rung (``NAME.w<width>``) in the
same storage (`tuner.study.workflows.ladder`); the page of ``NAME`` lists them all, so a team
sees the climb: rungs waiting, searching, done, and each rung's best trial by the first
objective (its own trials, not the ones warm-started from the rung below).
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import TrialState

from tuner.study.results.trial_record import study_objectives, trial_records
from tuner.study.run.resume import counts_toward_target
from tuner.study.specs.ladder_spec import rung_name
from tuner.study.store import records
from tuner.study.store import storage as st


def is_ladder_base(attrs: dict[str, Any]) -> bool:
    """True for a ladder's bottom rung (the study the user submitted), from its attributes."""
    ladder = (attrs.get(records.SPEC) or {}).get("ladder") or {}
    return bool(ladder) and int(ladder.get("rung", 0) or 0) == 0


def ladder_rungs(study: optuna.Study) -> dict[str, Any]:
    """``rungs``: one row per width, bottom first (width, study, state, done/total/running
    trials, the rung's best trial); a rung not created yet is ``waiting`` with its total
    unknown (the promotions decide it)."""
    spec = st.stored_spec(study)
    lad = spec.ladder
    storage = study._storage  # the rungs live in the storage the bottom rung was read from
    found = st.find_studies([rung_name(spec.name, lad.widths, i) for i in range(len(lad.widths))],
                            storage, loaded={study.study_name: study})
    rows = []
    for i, width in enumerate(lad.widths):
        name = rung_name(spec.name, lad.widths, i)
        row: dict[str, Any] = {"rung": i, "width": width, "study": name, "state": "waiting",
                               "done": 0, "total": None, "running": 0, "best": None}
        if name in found:
            s = found[name]
            trials = s.get_trials(deepcopy=False)
            total = int((s.user_attrs.get(records.SPEC) or {}).get("study", {})
                        .get("n_trials", 0))
            done = sum(counts_toward_target(t) for t in trials)
            row |= {"total": total, "done": done,
                    "running": sum(t.state == TrialState.RUNNING for t in trials),
                    "state": "done" if done >= total else "searching", "best": _best(s)}
        rows.append(row)
    return {"rungs": rows}


def _best(study: optuna.Study) -> dict[str, Any] | None:
    """The rung's best own trial by its first objective: number, lr, the objective's value."""
    objective = study_objectives(study)[0]
    own = [r for r in trial_records(study) if r.feasible and not r.warm_start]
    if not own:
        return None
    sign = 1.0 if objective.direction == "minimize" else -1.0
    b = min(own, key=lambda r: (sign * r.values[objective.name], r.number))
    return {"number": b.number, "lr": b.recipe.lr, "objective": objective.name,
            "value": b.values[objective.name]}
