"""A law study's grid on its service page: every token budget, how far its search has come, its
optimum from all its trials so far, and the laws through the budgets fitted so far.

A law study is its budget 0 (``NAME``) plus one study per further budget (``NAME.t<tokens>``)
in the same storage (`tuner.study.workflows.law`); the page of ``NAME`` shows them all, so a
team watches the grid fill in: budgets waiting, searching, done; each budget's optimum with
its interval once it has enough trials; the lr law (and the batch law) as soon as two budgets
place one; the held-out budget's prediction, stored before it runs, and then its measurement.

The fit (`tuner.study.workflows.law_fit.fit_law`: a response surface per budget, bootstrapped)
is the same one law.md reports. It is redone only when a trial of the law has ended since the
last fit: a page polled every half second costs one read of the budgets' trials, not a fit.
"""

from __future__ import annotations

import threading
from typing import Any

import optuna
from optuna.trial import TrialState

from tuner.study.run.resume import counts_toward_target
from tuner.study.specs.law_spec import budget_name
from tuner.study.specs.spec import StudySpec
from tuner.study.store import records
from tuner.study.store import storage as st
from tuner.study.workflows.law_fit import fit_law

_FITS: dict[tuple[str, tuple[tuple[int, int], ...]], dict[str, Any]] = {}
_FITS_MAX = 64  # studies whose last fit is kept
_LOCK = threading.Lock()


def is_law_base(attrs: dict[str, Any]) -> bool:
    """True for a law study's budget 0 (the study the user submitted), from its attributes."""
    law = (attrs.get(records.SPEC) or {}).get("law") or {}
    return bool(law) and int(law.get("budget", 0) or 0) == 0


def law_grid(study: optuna.Study, *, driven: bool | None = True) -> dict[str, Any]:
    """The grid of the law whose budget 0 is ``study``: ``budgets`` (one row per budget, in
    order: tokens, held_out, state, done/total/running trials, and the budget's fit) and the
    fit's ``lr_law``, ``batch_law``, ``predicted`` and ``held_out_check`` (None until placed),
    and ``answer``, law.md's answer in one line (`reports.laws.law.answer_line`).

    A budget's state: waiting (no study yet), done (its trials all counted), searching (a
    driver runs the law: ``driven``; None, a law run from the command line, when one of its
    trials is running) or interrupted (short of its trials and nothing runs it)."""
    spec = st.stored_spec(study)
    law = spec.law
    storage = study._storage  # the budgets live in the storage the base study was read from
    found = st.find_studies([budget_name(spec.name, law, i) for i in range(len(law.budgets))],
                            storage, loaded={study.study_name: study})
    rows, studies = [], []
    for i, tokens in enumerate(law.budgets):
        name = budget_name(spec.name, law, i)
        held = bool(law.held_out) and i == len(law.tokens)
        # the held-out batch: a last budget at a fitted budget's tokens, one batch, predicted
        held_batch = law.held_out_batch_index == i
        row: dict[str, Any] = {"index": i, "study": name, "tokens": tokens, "held_out": held,
                               "held_out_batch": law.held_out_batch if held_batch else None,
                               "total": _total(spec, held or held_batch), "done": 0,
                               "running": 0, "state": "waiting"}
        s = found.get(name)
        if s is not None:
            trials = s.get_trials(deepcopy=False)
            row["done"] = sum(counts_toward_target(t) for t in trials)
            row["running"] = sum(t.state == TrialState.RUNNING for t in trials)
            runs = driven if driven is not None else row["running"] > 0
            row["state"] = ("done" if row["done"] >= row["total"] else
                            "searching" if runs else "interrupted")
            row["ended"] = sum(t.state.is_finished() for t in trials)
            studies.append((i, s))
        rows.append(row)
    fit = _fit(spec, studies, rows)
    by_index = {b["index"]: b for b in fit["budgets"]}
    # budgets a pooled lr law left out, with the lack of fit p that had each leave
    gone = {g["index"]: g["lack_of_fit_p"] for g in fit.get("lr_left_out", [])}
    for row in rows:
        b = by_index.get(row["index"], {})
        row |= {"optimum": b.get("optimum"), "best": b.get("best") or None,
                "error": b.get("error", ""),
                "in_lr_law": row["index"] in fit["lr_budgets"],
                "in_batch_law": row["index"] in fit["batch_budgets"]}
        if row["index"] in gone:
            row["left_out_p"] = gone[row["index"]]
        row.pop("ended", None)
    return {"variable": fit["variable"], "budgets": rows, "lr_law": fit["lr_law"],
            "lr_method": fit.get("lr_method", "per-budget"),
            "lack_of_fit_p": (fit.get("pooled") or {}).get("lack_of_fit_p"),
            "batch_law": fit["batch_law"], "predicted": fit["predicted"] or None,
            "held_out_check": fit["held_out_check"], "answer": fit["answer"]}


def _total(spec: StudySpec, held: bool) -> int:
    """A budget's trials to finish: the law's per budget, and a held-out budget's (or held-out
    batch's) predicted recipe on top (`tuner.study.workflows.law.budget_spec`)."""
    return (spec.law.trials or spec.study.n_trials) + (1 if held else 0)


def _fit(spec: StudySpec, studies: list[tuple[int, optuna.Study]],
         rows: list[dict[str, Any]]) -> dict[str, Any]:
    """`fit_law`'s numbers, refitted only when a budget has a trial more that ended."""
    key = (spec.name, tuple((r["index"], r["ended"]) for r in rows if "ended" in r))
    with _LOCK:
        hit = _FITS.get(key)
    if hit is not None:
        return hit
    from reports.laws.law import answer_line, full_run_view  # pandas: not at the CLI's start

    law = fit_law(spec, studies)
    fit = law.to_dict()
    try:
        full = full_run_view(law, spec, studies)
    except ValueError as e:  # the grid still shows; the page names no path
        why = ("its [full_run] cannot be exported: " + str(e).split(":")[0]
               if type(e).__name__ == "ExportError" else "its target cannot be read now")
        fit["answer"] = f"law {spec.name}: no full-run answer ({why})."
    else:
        fit["answer"] = answer_line({"name": spec.name, "full_run": full,
                                     "held_out_check": fit["held_out_check"]})
    with _LOCK:
        for old in [k for k in _FITS if k[0] == spec.name]:
            del _FITS[old]
        while len(_FITS) >= _FITS_MAX:
            del _FITS[next(iter(_FITS))]
        _FITS[key] = fit
    return fit
