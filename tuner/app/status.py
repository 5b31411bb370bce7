"""Tables for ``moetune status``: one row per trial, one row per study, or one row per budget
of a law (every budget, those interrupted or not started included)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.trial import TrialState

from tuner.study.results import ranking
from tuner.study.results.reasons import one_line
from tuner.study.results.trial_record import study_objectives, trial_records
from tuner.study.run.resume import INTERRUPTED, counts_toward_target, is_interrupted, n_done
from tuner.study.specs.law_spec import LawSection, base_name, budget_name
from tuner.study.store import records
from tuner.study.store import storage as st

MAX_REASON = 60


def trial_rows(study: optuna.Study) -> list[dict[str, Any]]:
    """number, outcome, objective values, the searched params, and why (shortened); best
    first: the feasible trials by Pareto rank, then by the first objective, the knee (what
    ``export --pick knee`` takes; the best trial with one objective) marked, then the others
    in trial order."""
    names = study.metric_names or [f"value{i}" for i in range(len(study.directions))]
    order, knee = _ranking(study)
    rows = []
    for t in sorted(study.get_trials(deepcopy=False),
                    key=lambda t: (order.get(t.number, len(order)), t.number)):
        row: dict[str, Any] = {"#": t.number,
                               "outcome": _outcome(t),
                               "": "knee" if t.number == knee else ""}
        for i, name in enumerate(names):
            row[name] = t.values[i] if t.values else ""
        row.update(t.params)
        row["reason"] = one_line(t.user_attrs.get(records.REASON) or "")[:MAX_REASON]
        rows.append(row)
    return rows


def _outcome(t: optuna.trial.FrozenTrial) -> str:
    """A trial's outcome as a user reads it: "interrupted" for one a stopped driver left
    (re-run by `moetune resume`, not a failure of its recipe), else the stored outcome."""
    if is_interrupted(t):
        return INTERRUPTED
    return str(t.user_attrs.get(records.OUTCOME, t.state.name.lower()))


def _ranking(study: optuna.Study) -> tuple[dict[int, int], int | None]:
    """Each feasible trial's place (Pareto rank, then the first objective) and the knee."""
    objectives = study_objectives(study)
    recs = trial_records(study)
    feasible = [r for r in recs if r.feasible]
    if not feasible:
        return {}, None
    points = ranking.minimised(feasible, objectives)
    ranks = ranking.nondominated_ranks(points)
    places = sorted(range(len(feasible)), key=lambda i: (ranks[i], points[i][0],
                                                         feasible[i].number))
    knee = ranking.study_knee(recs, objectives)
    return ({feasible[i].number: k for k, i in enumerate(places)},
            knee.number if knee is not None else None)


def study_summary_rows(studies: Sequence[optuna.Study]) -> list[dict[str, Any]]:
    rows = []
    for s in studies:
        trials = s.get_trials(deepcopy=False)
        outcomes = Counter(_outcome(t) for t in trials)
        spec = s.user_attrs.get(records.SPEC, {})
        target = spec.get("study", {}).get("n_trials", "?")
        running = sum(t.state == TrialState.RUNNING for t in trials)
        rows.append({"study": s.study_name, "trials": f"{len(trials)}/{target}",
                     "complete": outcomes["complete"], "infeasible": outcomes["infeasible"],
                     "pruned": outcomes["pruned"], "fail": outcomes["fail"],
                     INTERRUPTED: outcomes[INTERRUPTED], "running": running,
                     "best": _best(s)})
    return rows


def law_budget_rows(study: optuna.Study) -> list[dict[str, Any]]:
    """One row per budget of the law ``study`` belongs to (any of its budgets' studies), in
    budget order, with its state: complete, running, interrupted (fewer than its ``n_trials``
    finished and none running) or not started; [] when ``study`` is no law's."""
    spec = st.stored_spec(study)
    law = spec.law
    if not law.on:
        return []
    store = study._storage
    base = base_name(study.study_name, law)
    found = st.find_studies([budget_name(base, law, i) for i in range(len(law.budgets))], store)
    rows = []
    for i, tokens in enumerate(law.budgets):
        name = budget_name(base, law, i)
        head = {"budget": f"{i + 1}/{len(law.budgets)}", "tokens": tokens}
        role = {"role": _role(law, i)}
        if name not in found:
            rows.append(head | {"state": "not started", "study": name} | role)
            continue
        budget = found[name]
        row = study_summary_rows([budget])[0]
        target = st.stored_spec(budget).study.n_trials
        state = ("complete" if n_done(budget) >= target else
                 "running" if row["running"] else "interrupted")
        rows.append(head | {"state": state} | row | role)
    return rows


def _role(law: LawSection, i: int) -> str:
    """What budget ``i`` is to the law: fitted, or a check predicted before it ran (the held-out
    budget, the held-out batch), which joins no fit or, for the held-out budget, only after."""
    if law.held_out_batch and i == law.held_out_batch_index:
        return f"held-out batch (batch_end {law.held_out_batch})"
    if law.held_out and i == len(law.tokens):
        return "held out"
    return "fitted"


def _best(study: optuna.Study) -> str:
    """The feasible trial best on the first objective."""
    first = study_objectives(study)[0]
    feasible = [r for r in trial_records(study) if r.feasible]
    if not feasible:
        return ""
    pick = min if first.direction == "minimize" else max
    best = pick(feasible, key=lambda r: r.values[first.name])
    return f"{first.name}={best.values[first.name]:.4g} (#{best.number})"


def all_failed(study: optuna.Study) -> str | None:
    """A one-line summary if every trial that counts toward n_trials failed, else None.

    A study that produced no result at all is a failure of the run (usually one bug hit by
    every trial); the most common reason points at it.
    """
    counted = [t for t in study.get_trials(deepcopy=False) if counts_toward_target(t)]
    if not counted or any(t.state != TrialState.FAIL for t in counted):
        return None
    reasons = Counter(one_line(t.user_attrs.get(records.REASON) or "") or "(no reason recorded)"
                      for t in counted)
    reason, n = reasons.most_common(1)[0]
    return (f"all {len(counted)} trials failed; most common reason ({n} of {len(counted)}): "
            f"{reason}")


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """A plain fixed-width table (columns: union of the rows' keys, in first-seen order)."""
    if not rows:
        return "(no trials)"
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    cells = [[_fmt(r.get(c, "")) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(line.rstrip() for line in lines)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
