"""A study that fits how the optimal lr and batch move with the token budget (``[law]``).

Each budget is an ordinary study in the law's one storage (so reports, export, rerun and the
service read it as they read any study): budget 0 is ``[study] name``, budget i > 0
``<name>.t<tokens>`` (`law_spec.budget_name`). Every budget searches the same space afresh (a
budget's optimum is not another's, so no warm start carries over), without pruning (the
response surface wants every trial's final val_loss).

The held-out budget (``held_out``) runs last. Before it is created, the laws are fitted on the
budgets below it and their prediction (lr, batch, bands) is written into its spec
(``law.predicted``), so the stored study shows what was predicted before any of its trials ran;
its first trial is the predicted recipe (``start.enqueue[0]``: lr and batch snapped into the
space, the other knobs from the largest fitted budget's best trial), then its own search of
``trials`` trials, from which `tuner.study.workflows.law_fit` finds its optimum without that first
trial.

The held-out batch (``held_out_batch``, with ``batches``) runs after it, at the largest fitted
budget or (``held_out_batch_budget = "held_out"``) at the held-out budget: before it is created,
lr*(D, B) is fitted on the cells of the budgets up to that one (at the held-out budget: the
fitted budgets' and the held-out budget's, whose check has ended and joined the law) and its lr
at that budget and batch (with the band) is written into its spec the same way; its first
trial is that lr at that batch, then its own search of lr at that one batch.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import time
from typing import Any

import optuna

from tuner.modeling.laws.interface import LrLaw
from tuner.study.run import resume as rs
from tuner.study.run.preflight import Found
from tuner.study.specs.law_spec import LawSection, budget_name
from tuner.study.specs.spec import BudgetSection, PruningSection, StudySpec, with_batches
from tuner.study.specs.start_spec import StartSection
from tuner.study.specs.urls import shown
from tuner.study.store import storage as st
from tuner.study.workflows.law_fit import budget_studies, fit_law
from tuner.study.workflows.law_progress import LawClock, budget_line, plan_line
from tuner.study.workflows.stage import Stage, Stages, check_owned


class LawUnfit(ValueError):
    """The fitted budgets place no lr law, so the held-out budget cannot be predicted."""


def budget_spec(spec: StudySpec, i: int, *, predicted: dict[str, Any] | None = None,
                point: dict[str, Any] | None = None) -> StudySpec:
    """The spec of budget ``i`` of the law ``spec`` (its base study's spec)."""
    law = spec.law
    tokens = law.budgets[i]
    n = law.trials or spec.study.n_trials
    every = max(1, tokens // 4)
    batches = law.batches_at(i)
    space = with_batches(spec.space, list(batches)) if batches != law.batches else spec.space
    return dataclasses.replace(
        spec, space=space,
        study=dataclasses.replace(spec.study, name=budget_name(spec.name, law, i),
                                  n_trials=n + (1 if point else 0)),
        budget=BudgetSection(tokens_per_trial=tokens, eval_every_tokens=every),
        pruning=PruningSection(scheduler="none", grace_tokens=every,
                               reduction_factor=spec.pruning.reduction_factor),
        start=spec.start if i == 0 else StartSection(enqueue=(point,) if point else ()),
        law=dataclasses.replace(law, budget=i, predicted=dict(predicted or {})))


def predicted_point(spec: StudySpec, prediction: dict[str, Any],
                    best_params: dict[str, Any]) -> dict[str, Any]:
    """The held-out budget's first trial: the predicted lr and batch snapped into the space,
    the other searched knobs as the largest fitted budget's best trial set them."""
    dists = spec.space.distributions()
    point = {k: v for k, v in best_params.items() if k in dists}
    point["lr"] = snap(dists["lr"], prediction["lr"])
    batch = prediction.get("batch", prediction.get("at_batch"))
    if batch and "batch_end" in dists:
        seq_len = spec.space.largest("seq_len")
        point["batch_end"] = snap(dists["batch_end"], batch / seq_len)
    return point


def snap(dist: optuna.distributions.BaseDistribution, value: float) -> Any:
    """The value of ``dist`` nearest ``value`` in log space (a float range: clipped)."""
    if isinstance(dist, optuna.distributions.CategoricalDistribution):
        numeric = [c for c in dist.choices if isinstance(c, int | float)
                   and not isinstance(c, bool) and c > 0]
        return min(numeric, key=lambda c: abs(math.log(c / value)))
    if isinstance(dist, optuna.distributions.IntDistribution):
        values = list(range(dist.low, dist.high + 1, dist.step))
        i = bisect.bisect_left(values, value)
        near = [v for v in values[max(0, i - 1):i + 1] if v > 0] or values[:1]
        return min(near, key=lambda c: abs(math.log(c / value)))
    if isinstance(dist, optuna.distributions.FloatDistribution):
        return min(max(float(value), dist.low), dist.high)
    raise ValueError(f"cannot place {value!r} in {dist!r}")


def law_stages(spec: StudySpec, url: str, log: Any = print,
               first: Found | None = None) -> Stages:
    """The law's budgets as stages (`stage_runner.run_stages` runs them), smallest first, resuming
    those that exist (``first``: budget 0's study as the caller's preflight found it). The
    held-out budget and the held-out batch are predicted here, just before they run, from the
    budgets already stored; a law whose fitted budgets place no lr law stops before them
    (logged)."""
    law = spec.law
    clock = LawClock(spec=spec)  # the budgets run start to end here: the whole law's ETA
    log(plan_line(spec))
    # opened once, when the first stage has created the database
    store = first.store if first is not None else None
    loaded: dict[str, optuna.Study] = {}  # each budget's study once found or run here
    for i in range(len(law.budgets)):
        name = budget_name(spec.name, law, i)
        if store is None:
            store = st.storage_if_exists(url)
        found = first if i == 0 and first is not None else _found(name, store)
        if i and found is not None:  # another's study of this budget's name is not adopted
            check_owned(found.study, spec.name)
        existing = found.study if found is not None else None
        if found is not None:
            bspec = found.stored
            loaded[name] = found.study
        elif i in (len(law.tokens), law.held_out_batch_index):  # predict, then run
            try:
                if store is None:
                    raise LawUnfit(f"{spec.name}: no held-out prediction: no fitted budget is "
                                   f"stored at {shown(url)}")
                bspec = (_held_out_batch_spec if i == law.held_out_batch_index
                         else _held_out_spec)(spec, store, loaded, log)
            except LawUnfit as e:
                log(str(e))
                return
        else:
            bspec = budget_spec(spec, i)
        done_before = _n_done(existing)
        log(budget_line(spec, i, done_here=done_before, clock=clock)
            + f"; study {name}"
            + (", held out, predicted lr {:.3g}".format(bspec.law.predicted["lr"])
               if bspec.law.is_held_out or bspec.law.is_held_out_batch else ""))
        t0 = time.monotonic()
        summary = yield Stage(i, bspec, existing is not None, found)
        if summary is not None:  # the study as the stage ran it: a prediction reads it here
            loaded[name] = summary.study
        if done_before == 0:
            clock.record(i, time.monotonic() - t0)


def _found(name: str, store: optuna.storages.RDBStorage | None) -> Found | None:
    """Study ``name`` with its stored spec, if ``store`` holds it."""
    study = st.find_study(name, store) if store is not None else None
    return Found(store, study, st.stored_spec(study)) if study is not None and store else None


def _n_done(study: optuna.Study | None) -> int:
    return rs.n_done(study) if study is not None else 0


def _held_out_spec(spec: StudySpec, store: optuna.storages.BaseStorage,
                   loaded: dict[str, optuna.Study], log: Any) -> StudySpec:
    """The held-out budget's spec, with the laws' prediction from the budgets below it."""
    law: LawSection = spec.law
    studies = [(i, s) for i, s in budget_studies(spec, store, loaded) if i < len(law.tokens)]
    by_index = dict(studies)
    fit = fit_law(spec, studies)
    if fit.lr_law is None:  # the held-out budget would check nothing
        raise LawUnfit(f"{spec.name}: no held-out prediction: fewer than 2 fitted budgets "
                       "have an lr optimum inside their searched range (law/law.md says which "
                       "sit on its edge); widen [space] lr and `moetune resume` the law")
    prediction = fit.predict(law.held_out)
    if law.held_out_at_batch and fit.lr_batch is None:
        raise LawUnfit(f"{spec.name}: no held-out prediction at law.held_out_at_batch = "
                       f"{law.held_out_at_batch}: no lr law in tokens and batch "
                       f"({fit.lr_batch_note})")
    if fit.lr_batch is not None and law.batches:  # lr*(D, B) at each batch it will search
        seq_len = spec.space.largest("seq_len")
        prediction["cells"] = [
            {"batch": float(b * seq_len), "lr": fit.lr_batch.at(law.held_out, b * seq_len),
             "lr_band": list(fit.lr_batch.band(law.held_out, b * seq_len))}
            for b in law.batches_at(len(law.tokens))]
        if law.held_out_at_batch:  # checked at that batch alone: lr*(D, B) there is the answer
            cell = prediction["cells"][0]
            prediction = {k: v for k, v in prediction.items() if k not in ("batch", "batch_band")}
            prediction |= {"lr": cell["lr"], "lr_band": cell["lr_band"], "at_batch": cell["batch"]}
    largest = fit.fitted[-1] if fit.fitted else None
    best = {}
    if largest is not None and largest.best:
        best = dict(by_index[largest.index].trials[int(largest.best["number"])].params)
    point = predicted_point(budget_spec(spec, len(law.tokens)), prediction, best)
    log(f"{spec.name}: predicted at {law.held_out} tokens from {len(fit.fitted)} budgets: "
        f"lr {prediction['lr']:.3g} (band {prediction['lr_band'][0]:.3g}-"
        f"{prediction['lr_band'][1]:.3g})"
        + (f", batch {prediction['batch']:.0f} tokens" if "batch" in prediction else "")
        + (f", lr*(D, B) at {prediction['at_batch']:.0f} tokens per step, the one batch it "
           "searches" if "at_batch" in prediction else ""))
    return budget_spec(spec, len(law.tokens), predicted=prediction, point=point)



def _held_out_batch_spec(spec: StudySpec, store: optuna.storages.BaseStorage,
                         loaded: dict[str, optuna.Study], log: Any) -> StudySpec:
    """The held-out batch's spec: its budget (`LawSection.held_out_batch_at`) at
    ``held_out_batch``, with lr*(D, B) there as its prediction (and its first trial), fitted
    on the fitted budgets' cells and, when it runs at the held-out budget, that budget's cells
    too (its check has ended: `law_fit.fit_law` joins it to the law)."""
    law: LawSection = spec.law
    tokens = law.held_out_batch_at
    below = len(law.tokens) + (1 if law.held_out and tokens == law.held_out else 0)
    fit = fit_law(spec, [(i, s) for i, s in budget_studies(spec, store, loaded) if i < below])
    if fit.lr_batch is None:
        raise LawUnfit(f"{spec.name}: no held-out batch prediction: no lr law in tokens and "
                       f"batch ({fit.lr_batch_note})")
    batch = law.held_out_batch * spec.space.largest("seq_len")
    prediction = batch_prediction(fit.lr_batch, tokens, batch)
    lr, band = prediction["lr"], prediction["lr_band"]
    point = {"lr": snap(spec.space.distributions()["lr"], lr), "batch_end": law.held_out_batch}
    log(f"{spec.name}: predicted at {tokens} tokens and {batch} tokens per step from "
        f"{fit.lr_batch.n_cells} cells: lr {lr:.3g} (band {band[0]:.3g}-{band[1]:.3g})")
    return budget_spec(spec, len(law.budgets) - 1, predicted=prediction, point=point)


def batch_prediction(lr_batch: LrLaw, tokens: int, batch: float) -> dict[str, Any]:
    """A held-out batch's prediction as its spec stores it (``law.predicted``): the law in tokens
    and batch at (``tokens``, ``batch`` tokens per step), its band and its distance past the
    fitted cells."""
    return {"tokens": tokens, "batch": float(batch), "lr": lr_batch.at(tokens, batch),
            "lr_band": list(lr_batch.band(tokens, batch)),
            "decades_past": lr_batch.decades_past(tokens, batch)}
