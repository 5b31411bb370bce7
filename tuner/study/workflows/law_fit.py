"""A law study's answer, from its budget studies' own trials: each budget's optimum (a response
surface over all its trials, `tuner.modeling.laws.response_surface`), the lr and batch laws with
their band, and the held-out check.

The lr law, when every fitted budget ran its trials at one batch, is pooled: one surface over
every budget's trials whose bowls' bottoms lie on the law (`tuner.modeling.laws.pooled_law`), so a
sharp bowl weighs more than a flat one, a budget whose optimum sits on the range's edge still
counts, and a lack-of-fit test says whether one power law holds. Otherwise (the batch searched:
each budget's surface is in lr and batch) it is the line through the budgets' optima
(`tuner.modeling.laws.power_law.fit_power_law`), as the batch law always is; that line is kept
beside a pooled law for comparison (``lr_line``).

Notation: D tokens per trial, M the proxy's non-embedding training FLOPs per token (DeepSeek
LLM's M), C = M·D, B the final batch in tokens per step (batch_end × seq_len). The laws are in
x = D under µP and x = C in standard parametrization (`tuner.study.specs.law_spec`).

Where the budgets' trials ran at 3 or more batches with lr searched at each, the lr law in tokens
and batch goes through one cell per (budget, batch) (``lr_batch``): of the registered forms
(`tuner.modeling.laws.forms`; lr*(D, B), `tuner.modeling.laws.lr_batch_law`, among them) the
one with the smallest AICc on the cells, the law an export reads at the batch it writes.
Without it a law's lr holds at the batch it was measured at only
(`tuner.modeling.laws.lr_at_batch`).

For a line through the optima, an optimum on the edge of the range its budget searched is
censored: the optimum lies beyond it, so that budget is left out of that law (``lr_budgets``,
``batch_budgets`` say which went in).

With a law in tokens and batch, the held-out budget's prediction also holds lr*(D, B) at each
batch it searches (``cells``), checked against the optimum of its own trials at that batch.
The held-out batch (``held_out_batch``) is checked the same way in lr alone: its spec holds
lr*(D, B) at its budget (the largest fitted, or the held-out one: ``held_out_batch_budget``) and
that batch, made before it ran from the cells of the budgets up to its own; its optimum comes
from its own search at that one batch, its predicted trial left out (``held_out_batch_check``).
It never joins the laws.

The held-out check compares the prediction stored in the held-out budget's spec before it ran
(``law.predicted``) with that budget's own optimum, found from its own search: the trial of the
predicted recipe (the budget's ``start.enqueue[0]``) is left out of that surface, and its
val_loss is set against the surface's minimum (fitted) and against the best of the budget's
searched trials (measured), each in noise sd (the budget's measured noise, else the surface's
residual sd) and in %; ``floor_below_trials`` says the surface's minimum lies more than 2 sd
below every trial of the budget, where the quadratic does not describe the bottom and only the
measured comparison means anything. Beside it, the rule an export applies without a law: the
smallest budget's best-of-n lr moved by DeepSeek LLM's exponent, (C_held/C_smallest)^−0.125.

Once the held-out budget's search has ended, the check is made and the budget joins the laws
(``held_out_in_law``): the check reads the prediction stored before it ran, so it stays out of
sample, while the laws the report draws and the export extrapolates go through every budget,
the one nearest the full run included (into the budgets the pooled law kept without it: the
lack-of-fit test leaves small budgets out as before, judged without the held-out budget, so a
misfit at the top does not cost the bottom's lever arm; the joined law's p reports it). Why: it
lengthens the lever arm by its distance above the largest fitted budget, and where lr* bends
with the budget (real trainings here: it decays more slowly toward longer budgets,
benchmarks/RESULTS.md) it is the budget that shows the bend. In
known-law simulations (`benchmarks/bench_law.py pooled`, benchmarks/RESULTS.md, "Pooled law fit
against per-budget optima"), predicting two decades past it: at 16 trials per budget it brought
the prediction closer with a narrower band; at 8 trials the median error was
unchanged and a flat held-out bowl worsened a few studies; on a bent law it cut the error by
1.1-1.7x (no power law extrapolates a bent one well: the check's verdict says so).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna

from tuner.modeling.cost_model import count_params, non_embedding_flops_per_token
from tuner.modeling.laws.forms import fit_lr_law
from tuner.modeling.laws.interface import LrForm
from tuner.modeling.laws.lr_batch_law import (
    WINDOW,
    Cell,
    LawFitError,
    cell_from_optimum,
    cell_optimum,
    censored_bound,
    skew_shift,
)
from tuner.modeling.laws.pooled_law import PooledLaw, PooledLawError, fit_pooled_law
from tuner.modeling.laws.power_law import PowerLaw, StudyLaw, fit_power_law
from tuner.modeling.laws.response_surface import Optimum, SurfaceError, fit_optimum
from tuner.modeling.scaling import LR_EXPONENT
from tuner.study.results.noise import noise_sd
from tuner.study.results.trial_record import TrialRecord, trial_records
from tuner.study.run.resume import n_done
from tuner.study.specs.law_spec import LawSection, budget_name
from tuner.study.specs.spec import StudySpec
from tuner.study.store import database as db
from tuner.study.store import records
from tuner.study.store import storage as st

PREDICTED_POINT = "start.enqueue[0]"  # the held-out budget's trial of the predicted recipe


@dataclass(frozen=True, kw_only=True)
class BudgetResult:
    """One budget: its optimum from all its trials, and best-of-n beside it."""

    index: int
    study: str
    tokens: int
    compute: float
    held_out: bool
    n_trials: int
    optimum: Optimum | None
    error: str  # why there is no optimum ("" when there is)
    best: dict[str, float]  # best-of-n: number, lr, batch, loss
    noise_sd: float | None
    predicted_trial: dict[str, float]  # held-out only: the predicted recipe's trial
    # (lr, batch in tokens, val_loss) of every feasible own trial, for the pooled law
    trials: tuple[tuple[float, float, float], ...] = ()
    finished: bool = False  # its study holds its n_trials counted trials (`resume.n_done`:
    # interrupted ones are re-run, so they do not count), so its search is done
    held_out_batch: bool = False  # the held-out batch's budget: never in the laws

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "study": self.study, "tokens": self.tokens,
                "compute": self.compute, "held_out": self.held_out,
                "n_trials": self.n_trials, "error": self.error, "best": self.best,
                "noise_sd": self.noise_sd, "predicted_trial": self.predicted_trial,
                "optimum": self.optimum.to_dict() if self.optimum else None,
                "finished": self.finished, "held_out_batch": self.held_out_batch}


@dataclass(frozen=True, kw_only=True)
class LawFit:
    """Every budget that exists, the laws through the fitted ones, the held-out check."""

    name: str
    variable: str  # "tokens" | "compute"
    flops_per_token: float  # M
    params: float  # N: active non-embedding parameters (Step Law's N, for reference)
    budgets: tuple[BudgetResult, ...]
    lr_law: PowerLaw | None
    batch_law: PowerLaw | None
    predicted: dict[str, Any]  # as stored in the held-out budget's spec before it ran
    # the budgets each law went through (an optimum on the range's edge is left out)
    lr_budgets: tuple[int, ...] = ()
    batch_budgets: tuple[int, ...] = ()
    lr_method: str = "per-budget"  # "pooled" | "per-budget" (module docstring)
    pooled: PooledLaw | None = None  # the pooled fit behind a pooled lr law
    lr_line: PowerLaw | None = None  # beside a pooled law: the line through the optima
    # budgets a pooled law left out (the smallest, while one power law did not hold), with the
    # lack of fit p that had each leave
    lr_left_out: tuple[tuple[int, float], ...] = ()
    held_out_in_law: bool = False  # the held-out budget's search ended: the laws include it
    # the lr law in tokens and batch through the (budget, batch) cells, where the trials ran at
    # 3 or more batches (`lr_batch_law`: the registered form that fits them best); else None
    # and why
    lr_batch: LrForm | None = None
    lr_batch_note: str = ""
    predicted_batch: dict[str, Any] = field(default_factory=dict)  # as stored in the held-out
    # batch's spec before it ran

    def x(self, tokens: float, flops_per_token: float | None = None) -> float:
        """The laws' variable at ``tokens`` (C with ``flops_per_token``, default the proxy's)."""
        return tokens if self.variable == "tokens" else (flops_per_token or
                                                        self.flops_per_token) * tokens

    @property
    def fitted(self) -> list[BudgetResult]:
        """The budgets the laws go through (the held-out one once its search ended)."""
        return [b for b in self.budgets if (not b.held_out or self.held_out_in_law)
                and not b.held_out_batch and b.optimum is not None]

    @property
    def held(self) -> BudgetResult | None:
        return next((b for b in self.budgets if b.held_out), None)

    @property
    def batch_below_range(self) -> float | None:
        """Without a batch law, when every fitted budget searched the batch and placed its
        optimum on the smallest batch it ran (``at_edge``): that batch in tokens. The optimal
        batch then lies below the range (more steps win at these budgets: measured on real
        trainings here, benchmarks/RESULTS.md), so no law can be placed until the range reaches
        below it; None otherwise."""
        placed = [b for b in self.fitted if _o(b).batch_placed]
        if self.batch_law is not None or not placed or len(placed) < len(self.fitted):
            return None
        low = [min(t[1] for t in b.trials) for b in placed]
        if all("batch" in _o(b).at_edge and math.isclose(_o(b).batch, lo, rel_tol=1e-6)
               for b, lo in zip(placed, low)):
            return max(low)
        return None

    def predict(self, tokens: float) -> dict[str, Any]:
        """The laws' lr and batch at ``tokens`` of the proxy, with their bands."""
        if self.lr_law is None:
            raise ValueError(f"law {self.name!r}: no lr law (it needs at least 2 fitted budgets "
                             "whose lr optimum lies inside the searched range)")
        x = self.x(tokens)
        out: dict[str, Any] = {"tokens": tokens, "x": x, "lr": self.lr_law.at(x),
                               "lr_band": list(self.lr_law.band(x)),
                               "decades_past": self.lr_law.decades_past(x)}
        if self.batch_law is not None:
            out |= {"batch": self.batch_law.at(x), "batch_band": list(self.batch_law.band(x))}
        return out

    def study_law(self) -> StudyLaw | None:
        """The laws as the export uses them; None before an lr law exists."""
        if self.lr_law is None:
            return None
        return StudyLaw(name=self.name, variable=self.variable, lr=self.lr_law,
                        batch=self.batch_law, held_out=self.held_out_check(),
                        method=self.lr_method,
                        lack_of_fit_p=self.pooled.lack_of_fit_p if self.pooled else None,
                        lr_batch=self.lr_batch)

    def held_out_check(self) -> dict[str, Any] | None:
        """Predicted / measured at the held-out budget (module docstring); None before it has
        an optimum."""
        held = self.held
        if held is None or held.optimum is None or not self.predicted:
            return None
        p, o = self.predicted, held.optimum
        out: dict[str, Any] = {
            "tokens": held.tokens, "lr_predicted": p["lr"], "lr_band": p["lr_band"],
            "lr_measured": o.lr, "lr_interval": list(o.lr_interval),
            "lr_ratio": p["lr"] / o.lr,
            "lr_inside": p["lr_band"][0] <= o.lr <= p["lr_band"][1]}
        if "batch" in p and self.batch_law is not None:
            out |= {"batch_predicted": p["batch"], "batch_band": p["batch_band"],
                    "batch_measured": o.batch, "batch_interval": list(o.batch_interval),
                    "batch_ratio": p["batch"] / o.batch,
                    "batch_inside": p["batch_band"][0] <= o.batch <= p["batch_band"][1]}
        if p.get("cells"):
            out["cells"] = _held_cells(held, p["cells"])
        if "at_batch" in p and "lr_measured" in out["cells"][0]:  # searched at that batch
            # alone: the check is lr*(D, B) there against that cell's optimum, as the law's
            # cells are measured
            c = out["cells"][0]
            out |= {k: c[k] for k in ("lr_measured", "lr_interval", "lr_ratio", "lr_inside")}
            out["at_batch"] = p["at_batch"]
        smallest = self.budgets[0]
        if smallest.best:
            today = smallest.best["lr"] * (held.compute / smallest.compute) ** LR_EXPONENT
            out |= {"lr_today_rule": today, "lr_today_ratio": today / o.lr}
        return out | _recipe_gap(held, o)

    def held_out_batch_check(self) -> dict[str, Any] | None:
        """Predicted / measured lr* at the held-out batch (the prediction stored in its spec
        before it ran, from the fitted budgets' cells); None before it has an optimum.

        Like with like: the measured lr* is found as the law's cells are (`cell_optimum`: a
        quadratic in log lr within `WINDOW` decades of the best trial), not by the budget's
        whole-range surface, which is given beside it (``lr_surface``) with the factor between
        the two (``estimator_spread``): where a bowl is flat over a decade they differ by more
        than a check's tolerance, and the measured optimum is not pinned that closely."""
        hob = next((b for b in self.budgets if b.held_out_batch), None)
        p = self.predicted_batch
        if hob is None or not p:
            return None
        try:
            o, censored = cell_optimum([t[0] for t in hob.trials], [t[2] for t in hob.trials],
                                       seed=hob.index)
        except SurfaceError:
            return None
        s = hob.optimum
        spread = max(o.lr / s.lr, s.lr / o.lr) if s is not None else None
        return {"tokens": hob.tokens, "batch": p["batch"], "lr_predicted": p["lr"],
                "lr_band": p["lr_band"], "lr_measured": o.lr,
                "lr_interval": list(o.lr_interval), "lr_ratio": p["lr"] / o.lr,
                "lr_inside": p["lr_band"][0] <= o.lr <= p["lr_band"][1],
                "at_edge": sorted(set(o.at_edge) | ({"lr"} if censored else set())),
                "estimator": f"cells' (a quadratic within {WINDOW} decades of the best trial)",
                "lr_surface": s.lr if s is not None else None,
                "lr_surface_interval": list(s.lr_interval) if s is not None else None,
                "estimator_spread": spread,
                "decades_past": p.get("decades_past")} | _recipe_gap(hob, o)

    def compute_ratio(self) -> float | None:
        """The fitted budgets' compute (every trial) over a direct search at the held-out
        budget with as many trials as the held-out budget's own search."""
        held = self.held
        if held is None or not held.n_trials:
            return None
        fitted = sum(b.compute * b.n_trials for b in self.budgets
                     if not b.held_out and not b.held_out_batch)
        return fitted / (held.compute * held.n_trials)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "variable": self.variable,
                "flops_per_token": self.flops_per_token, "params": self.params,
                "budgets": [b.to_dict() for b in self.budgets],
                "lr_law": self.lr_law.to_dict() if self.lr_law else None,
                "batch_law": self.batch_law.to_dict() if self.batch_law else None,
                "predicted": self.predicted, "held_out_check": self.held_out_check(),
                "lr_budgets": list(self.lr_budgets), "batch_budgets": list(self.batch_budgets),
                "compute_ratio": self.compute_ratio(), "lr_method": self.lr_method,
                "pooled": self.pooled.to_dict() if self.pooled else None,
                "lr_left_out": [{"index": i, "lack_of_fit_p": p} for i, p in self.lr_left_out],
                "lr_line": self.lr_line.to_dict() if self.lr_line else None,
                "held_out_in_law": self.held_out_in_law,
                "lr_batch_law": self.lr_batch.to_dict() if self.lr_batch else None,
                "lr_batch_note": self.lr_batch_note,
                "held_out_batch_check": self.held_out_batch_check(),
                "batch_below_range": self.batch_below_range}


def _recipe_gap(b: BudgetResult, o: Optimum) -> dict[str, Any]:
    """The predicted recipe's measured val_loss (its trial, `PREDICTED_POINT`) against the
    optimum ``o`` of ``b``'s own search and against its best searched trial, in loss, in noise
    sd and in percent: what following the prediction cost, where a flat bowl leaves lr* itself
    unpinned. Empty without a predicted trial."""
    if not b.predicted_trial:
        return {}
    sd = b.noise_sd or o.tolerance
    measured = b.predicted_trial["loss"]
    gap = measured - o.loss
    out: dict[str, Any] = {"loss_predicted_recipe": measured, "loss_optimum": o.loss,
                           "loss_gap": gap, "loss_gap_sd": gap / sd if sd else math.nan,
                           "loss_gap_pct": 100 * gap / o.loss, "sd": sd,
                           "sd_measured": b.noise_sd is not None}
    if b.best:
        # Measured against measured: the surface's floor is a model, and where the quadratic
        # does not describe the bottom (its floor below every trial it was fitted to) the gap
        # to it is the fit's, not the recipe's. The best searched trial is a best of n (biased
        # low), so this gap errs against the prediction.
        best = b.best["loss"]
        out |= {"loss_best_searched": best, "loss_gap_best": measured - best,
                "loss_gap_best_sd": (measured - best) / sd if sd else math.nan,
                "loss_gap_best_pct": 100 * (measured - best) / best,
                "floor_below_trials": o.loss < min(best, measured) - 2 * sd}
    return out


def budget_studies(spec: StudySpec, storage: optuna.storages.BaseStorage,
                   loaded: Mapping[str, optuna.Study] | None = None
                   ) -> list[tuple[int, optuna.Study]]:
    """(budget index, study) of every budget of the law ``spec`` (its base study's spec) that
    exists in ``storage``; those in ``loaded`` (by name) are taken from it, not loaded again."""
    names = [budget_name(spec.name, spec.law, i) for i in range(len(spec.law.budgets))]
    found = st.find_studies(names, storage, loaded=loaded)
    return [(i, found[name]) for i, name in enumerate(names) if name in found]


def fit_law(spec: StudySpec, studies: Sequence[tuple[int, optuna.Study]], *,
            seed: int = 0) -> LawFit:
    """The law of ``spec`` from its budget ``studies``: the laws through the fitted budgets,
    and through the held-out one too once its search has ended (module docstring; the
    held-out prediction passes only the studies below the held-out budget)."""
    law = spec.law
    results = []
    m = n = 0.0
    stored = {i: st.stored_spec(study) for i, study in studies}  # each parsed once, here
    for i, study in studies:
        recs = [r for r in trial_records(study) if r.feasible and not r.warm_start]
        if recs and not m:
            args = recs[0].model_args
            m = non_embedding_flops_per_token(args, recs[0].recipe.seq_len)
            c = count_params(args)
            n = float(c.active - c.embedding - c.head)
        results.append(_budget(i, study, recs, law, m, seed, stored[i].study.n_trials))
    held_in = any(b.held_out and b.finished and b.optimum is not None for b in results)
    in_law = [b for b in results if b.index < len(law.tokens) or (held_in and b.held_out)]
    fitted = [b for b in in_law if b.optimum is not None]
    variable = law.variable

    def x_of(b: BudgetResult) -> float:
        return b.tokens if variable == "tokens" else b.compute

    # an optimum on the searched box's edge is censored (the optimum lies beyond the range):
    # a law through it would bend toward the range, so such a budget is left out of that law
    lr_pts = [b for b in fitted if b.optimum and "lr" not in b.optimum.at_edge]
    batch_pts = [b for b in fitted if b.optimum and b.optimum.batch_placed
                 and "batch" not in b.optimum.at_edge]
    lr_law = batch_law = None
    if len({x_of(b) for b in lr_pts}) >= 2:
        lr_law = fit_power_law([x_of(b) for b in lr_pts], [_o(b).lr for b in lr_pts],
                               [[10 ** s[0] for s in _o(b).samples] for b in lr_pts])
    pooled, pooled_budgets, left_out = _pooled(in_law, x_of, seed)
    if "batch_end" in spec.space.names() and len({x_of(b) for b in batch_pts}) >= 2:
        batch_law = fit_power_law([x_of(b) for b in batch_pts], [_o(b).batch for b in batch_pts],
                                  [[10 ** s[1] for s in _o(b).samples] for b in batch_pts])
    lr_batch, lr_batch_note = lr_batch_law(in_law, seed=seed)
    held = stored.get(len(law.tokens)) if law.held_out else None
    predicted = dict(held.law.predicted) if held is not None else {}
    hob = stored.get(law.held_out_batch_index) if law.held_out_batch_index is not None else None
    predicted_batch = dict(hob.law.predicted) if hob is not None else {}
    if pooled is not None:
        return LawFit(name=spec.name, variable=variable, flops_per_token=m, params=n,
                      budgets=tuple(results), lr_law=pooled.law, batch_law=batch_law,
                      predicted=predicted, lr_budgets=pooled_budgets,
                      batch_budgets=tuple(b.index for b in batch_pts), lr_method="pooled",
                      pooled=pooled, lr_line=lr_law, lr_left_out=left_out,
                      held_out_in_law=held_in, lr_batch=lr_batch, lr_batch_note=lr_batch_note,
                      predicted_batch=predicted_batch)
    return LawFit(name=spec.name, variable=variable, flops_per_token=m, params=n,
                  budgets=tuple(results), lr_law=lr_law, batch_law=batch_law,
                  predicted=predicted, lr_budgets=tuple(b.index for b in lr_pts),
                  batch_budgets=tuple(b.index for b in batch_pts), held_out_in_law=held_in,
                  lr_batch=lr_batch, lr_batch_note=lr_batch_note,
                  predicted_batch=predicted_batch)


def lr_batch_law(budgets: Sequence[BudgetResult], *, seed: int = 0
                 ) -> tuple[LrForm | None, str]:
    """The lr law in tokens and batch through the cells of ``budgets``' own trials, one per
    (budget, batch) with its lr searched, where the trials ran at 3 or more batches: the
    registered form with the smallest AICc on them (`tuner.modeling.laws.forms.fit_lr_law`;
    lr*(D, B), `tuner.modeling.laws.lr_batch_law`, among them); (None, why not) otherwise.
    In tokens D whatever the study's variable: at one width, C = M·D moves with D alone."""
    batches = {t[1] for b in budgets for t in b.trials}
    if len(batches) < 3:
        return None, (f"the trials ran at {len(batches)} batch(es); a law in tokens and batch "
                      "needs lr searched at 3 or more")
    try:
        return fit_lr_law(law_cells(budgets, seed=seed)), ""
    except LawFitError as e:
        return None, str(e)


def law_cells(budgets: Sequence[BudgetResult], *, seed: int = 0) -> list[Cell]:
    """One cell per (budget, batch) of ``budgets``' own trials that holds a bowl: its optimum
    from a quadratic in log lr (`cell_optimum`); an optimum on the searched range's edge is
    kept as the bound it gives (`censored_bound`)."""
    cells = []
    for b in budgets:
        for batch in sorted({t[1] for t in b.trials}):
            lrs = [t[0] for t in b.trials if t[1] == batch]
            losses = [t[2] for t in b.trials if t[1] == batch]
            try:
                opt, censored = cell_optimum(lrs, losses, seed=seed + b.index)
            except SurfaceError:
                continue  # too few trials at this batch for a bowl
            cells.append(cell_from_optimum(opt, tokens=float(b.tokens), batch=batch,
                                           censored=censored, skew=skew_shift(lrs, losses),
                                           bound=censored_bound(lrs, losses)))
    return cells


def _held_cells(held: BudgetResult, predicted: Sequence[dict[str, Any]]
                ) -> list[dict[str, Any]]:
    """The held-out budget's lr*(D, B) check, one row per batch it searched: the prediction
    stored before it ran against the optimum of its own trials at that batch (`cell_optimum`,
    as the law's cells are found; the predicted recipe's trial is not among them)."""
    out = []
    for c in predicted:
        row = dict(c)
        lrs = [t[0] for t in held.trials if math.isclose(t[1], c["batch"], rel_tol=1e-6)]
        losses = [t[2] for t in held.trials if math.isclose(t[1], c["batch"], rel_tol=1e-6)]
        try:
            opt, censored = cell_optimum(lrs, losses, seed=held.index)
        except SurfaceError as e:
            out.append(row | {"error": str(e)})
            continue
        # a flat bowl's quadratic puts its bottom on its window's edge: no optimum is placed
        # there, whatever the best trial's place (seed 0 of the grid at 2,048 tokens per step)
        out.append(row | {"lr_measured": opt.lr, "lr_interval": list(opt.lr_interval),
                          "lr_ratio": c["lr"] / opt.lr, "censored": censored,
                          "at_edge": "lr" in opt.at_edge,
                          "lr_inside": c["lr_band"][0] <= opt.lr <= c["lr_band"][1]})
    return out


def _pooled(in_law: list[BudgetResult], x_of: Any, seed: int
            ) -> tuple[PooledLaw | None, tuple[int, ...], tuple[tuple[int, float], ...]]:
    """The pooled lr law over the budgets ``in_law``, the budgets it went through and those it
    left out (with the lack of fit p that had each leave); (None, (), ()) when a budget's trials
    ran at more than one batch (its surface is in lr and batch) or too few budgets have trials
    (`tuner.modeling.laws.pooled_law`)."""
    fitted = [b for b in in_law if b.trials]
    if any(len({t[1] for t in b.trials}) > 1 for b in fitted):
        return None, (), ()

    def fit(budgets: list[BudgetResult], **kw: Any) -> PooledLaw:
        return fit_pooled_law([x_of(b) for b in budgets],
                              [[t[0] for t in b.trials] for b in budgets],
                              [[t[2] for t in b.trials] for b in budgets], seed=seed, **kw)

    below = [b for b in fitted if not b.held_out]
    held = [b for b in fitted if b.held_out]
    try:
        if not held:
            pooled = fit(below)
            return (pooled, tuple(below[bowl.index].index for bowl in pooled.bowls),
                    tuple((below[i].index, p) for i, p in pooled.left_out))
        # the held-out budget joins the budgets the fitted law kept: which small budgets
        # bend is decided without it, since a misfit at the top is its check's to say (and the
        # joined fit's lack of fit p says it too), not a reason to drop the bottom's lever arm
        trimmed = fit(below, n_boot=1)
        kept = [below[bowl.index] for bowl in trimmed.bowls] + held
        pooled = fit(kept, trim=False)
    except PooledLawError:
        return None, (), ()
    return (pooled, tuple(kept[bowl.index].index for bowl in pooled.bowls),
            tuple((below[i].index, p) for i, p in trimmed.left_out))


def _o(b: BudgetResult) -> Optimum:
    assert b.optimum is not None  # the callers filter on it
    return b.optimum


def _budget(i: int, study: optuna.Study, recs: list[TrialRecord], law: LawSection, m: float,
            seed: int, n_trials: int) -> BudgetResult:
    held = bool(law.held_out) and i == len(law.tokens)
    hob = i == law.held_out_batch_index
    tokens = law.budgets[i]
    marked = _predicted_numbers(study) if held or hob else set()
    predicted = [r for r in recs if r.number in marked]
    own = [r for r in recs if r not in predicted]
    sd = noise_sd(study.user_attrs)
    best: dict[str, float] = {}
    if own:
        b = min(own, key=lambda r: (r.values["val_loss"], r.number))
        best = {"number": b.number, "lr": b.recipe.lr, "batch": _batch(b),
                "loss": b.values["val_loss"]}
    optimum, error = None, ""
    try:
        optimum = fit_optimum([r.recipe.lr for r in own], [_batch(r) for r in own],
                              [r.values["val_loss"] for r in own], noise_sd=sd, seed=seed + i)
    except SurfaceError as e:
        error = str(e)
    pt = ({"number": predicted[0].number, "lr": predicted[0].recipe.lr,
           "batch": _batch(predicted[0]), "loss": predicted[0].values["val_loss"]}
          if predicted else {})
    return BudgetResult(index=i, study=study.study_name, tokens=tokens, compute=m * tokens,
                        held_out=held, n_trials=len(own), optimum=optimum, error=error,
                        best=best, noise_sd=sd, predicted_trial=pt,
                        trials=tuple((r.recipe.lr, _batch(r), r.values["val_loss"])
                                     for r in own),
                        finished=n_done(study) >= n_trials,
                        held_out_batch=hob)


def _batch(r: TrialRecord) -> float:
    """The trial's final batch in tokens per step."""
    return float(r.recipe.batch_end * r.recipe.seq_len)


def _predicted_numbers(study: optuna.Study) -> set[int]:
    """The trials of the predicted recipe (`PREDICTED_POINT`) in ``study``."""
    return {t.number for t in study.get_trials(deepcopy=False)
            if t.user_attrs.get(records.START_POINT) == PREDICTED_POINT}


def law_fit_at(spec: StudySpec, url: str,
               loaded: Mapping[str, optuna.Study] | None = None) -> LawFit:
    """`fit_law` of the law ``spec`` (its base study's spec) from the storage at ``url``
    (budgets in ``loaded`` are not loaded again)."""
    store = db.open_existing_storage(url)
    return fit_law(spec, budget_studies(spec, store, loaded))
