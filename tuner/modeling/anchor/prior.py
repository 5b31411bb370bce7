"""The prior at the full run: the peak LR and the final batch that published practice gives a run
of this size and length, with a band from how well that practice predicts a run it has not seen.

Published LRs are what labs chose, not measured optima, but at full scale they are tight: a law
in compute through the recipe table (`tuner.modeling.anchor.recipe_table`) predicts a left-out
recipe to about 0.13 decades. The form is not assumed, it is chosen by leave-one-recipe-out:

- ``deepseek``: log10 lr = a - 0.125 log10 C (DeepSeek LLM's published exponent,
  arXiv:2401.02954 eq. 1), the intercept fitted to the table;
- ``compute``: log10 lr = a + b log10 C, both fitted;
- ``size_tokens``: log10 lr = a + b log10 N + c log10 D (the form of Step Law,
  arXiv:2503.04715, refitted at full scale);
- ``compute_batch``: log10 lr = a + b log10 C + c log10 B;

each with an MoE's parameters counted active and counted total (dense rows are the same
either way), and the constant LR as the floor any form must beat. Every candidate is fitted
n times, each time without one row, and scored by the root mean square of its left-out
misses in decades; the smallest wins. The band at the target is that scatter, widened by
the target's leverage beyond the table's average (a run past the table's compute is an
extrapolation), with a Student t quantile for the table's size. The batch's prior is chosen
the same way among ``deepseek`` (B = a C^0.3271, arXiv:2401.02954), ``compute`` and the constant.

A team's own runs (``team`` rows) enter the fit like the published ones, and the prior then
moves by the team's mean left-out miss, shrunk by how many runs it rests on against the
scatter between labs (a random-effects estimate: a lab's choices move its LR by a
between-lab variance tau^2, a run scatters about its lab by sigma^2).

    >>> prior = fit_prior(load_recipes())                      # doctest: +SKIP
    >>> prior.read(point).lr, prior.read(point).band          # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tuner.modeling.anchor.recipe_table import PublishedRun, flops_per_token

LEVEL = 0.95
DEEPSEEK_LR_EXPONENT = -0.125
DEEPSEEK_BATCH_EXPONENT = 0.3271
SOURCE = ("the recipe table (tuner/modeling/anchor/recipes.toml: published pretraining runs, "
          "each with its paper and section), its form chosen by leave-one-recipe-out")


@dataclass(frozen=True, kw_only=True)
class RunPoint:
    """A run as the prior reads it: its size (non-embedding parameters, active and total), shape
    (for the attention FLOPs), tokens and final batch (tokens per step)."""

    n_active: float
    n_total: float
    layers: int
    dim: int
    seq_len: int
    tokens: float
    batch: float

    @classmethod
    def of(cls, run: PublishedRun) -> RunPoint:
        return cls(n_active=run.n_active, n_total=run.n_total, layers=run.layers, dim=run.dim,
                   seq_len=run.seq_len, tokens=run.tokens, batch=run.batch_end)

    def compute(self, params: str) -> float:
        n = self.n_active if params == "active" else self.n_total
        return flops_per_token(n, self.layers, self.dim, self.seq_len) * self.tokens

    def n(self, params: str) -> float:
        return self.n_active if params == "active" else self.n_total


@dataclass(frozen=True)
class Form:
    """A candidate law: its features of a point and a fixed exponent on log10 C (or none)."""

    name: str
    params: str  # "active" or "total": how an MoE's N enters C or N
    what: str  # the law in words
    features: Callable[[RunPoint, str], list[float]]
    fixed: float = 0.0  # a published exponent on log10 C, moved to the left-hand side

    @property
    def key(self) -> str:
        return f"{self.name}/{self.params}"

    def x(self, p: RunPoint) -> np.ndarray:
        return np.array([1.0, *self.features(p, self.params)])

    def offset(self, p: RunPoint) -> float:
        return self.fixed * math.log10(p.compute(self.params)) if self.fixed else 0.0


def _logc(p: RunPoint, params: str) -> list[float]:
    return [math.log10(p.compute(params))]


def _none(p: RunPoint, params: str) -> list[float]:
    return []


LR_FORMS = [f for params in ("active", "total") for f in (
    Form("deepseek", params, "lr = a * C^-0.125 (DeepSeek LLM's exponent, intercept fitted)",
         _none, DEEPSEEK_LR_EXPONENT),
    Form("compute", params, "lr = a * C^b", _logc),
    Form("size_tokens", params, "lr = a * N^b * D^c",
         lambda p, k: [math.log10(p.n(k)), math.log10(p.tokens)]),
    Form("compute_batch", params, "lr = a * C^b * B^c",
         lambda p, k: [math.log10(p.compute(k)), math.log10(p.batch)]),
)] + [Form("constant", "active", "lr = a (one LR for every run: the floor)", _none)]

BATCH_FORMS = [f for params in ("active", "total") for f in (
    Form("deepseek", params, "B = a * C^0.3271 (DeepSeek LLM's exponent, intercept fitted)",
         _none, DEEPSEEK_BATCH_EXPONENT),
    Form("compute", params, "B = a * C^b", _logc),
)] + [Form("constant", "active", "B = a (one batch for every run: the floor)", _none)]


@dataclass(frozen=True, kw_only=True)
class Fitted:
    """One form fitted to the table: coefficients, its leave-one-out misses (decades, per
    row) and the numbers its band needs."""

    form: Form
    beta: np.ndarray
    xtx_inv: np.ndarray
    loo: dict[str, float]  # row name -> its family left out: log10(predicted / published)
    mean_leverage: float
    n: int
    within: float  # RMS miss with one row out (its family kept): a lab the table knows


    @property
    def scatter(self) -> float:
        """Root mean square of the left-out misses (each row's family out), decades."""
        return float(math.sqrt(np.mean(np.square(list(self.loo.values())))))

    def predict(self, p: RunPoint, *, placed: bool = False) -> tuple[float, float]:
        """(log10 value, its sd in decades) at ``p``: the scatter of a new lab (each family
        left out), or with ``placed`` of a run whose lab the evidence places (one row out)."""
        x = self.form.x(p)
        lev = float(x @ self.xtx_inv @ x)
        scatter = self.within if placed else self.scatter
        sd = scatter * math.sqrt(1.0 + max(0.0, lev - self.mean_leverage))
        return float(x @ self.beta) + self.form.offset(p), sd


def _fit(form: Form, points: Sequence[RunPoint], y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = np.array([form.x(p) for p in points])
    target = y - np.array([form.offset(p) for p in points])
    beta, *_ = np.linalg.lstsq(x, target, rcond=None)
    return beta, np.linalg.pinv(x.T @ x)


def family_of(run: PublishedRun) -> str:
    """The group a row is left out with: its family (a lab and its lineage); a team's runs
    are one family."""
    return "team" if run.team else run.family


def fit_form(form: Form, rows: Sequence[PublishedRun], value: Callable[[PublishedRun], float]
             ) -> Fitted:
    """``form`` through ``rows`` (log10 of ``value``), and its left-out miss at every row, each
    row predicted by the form fitted without its whole family (module docstring)."""
    points = [RunPoint.of(r) for r in rows]
    y = np.log10([value(r) for r in rows])
    beta, inv = _fit(form, points, y)
    loo = {}
    for group in dict.fromkeys(family_of(r) for r in rows):
        out = [i for i, r in enumerate(rows) if family_of(r) == group]
        keep = [j for j in range(len(rows)) if j not in out]
        b, _ = _fit(form, [points[j] for j in keep], y[keep])
        for i in out:
            loo[rows[i].name] = float(form.x(points[i]) @ b + form.offset(points[i]) - y[i])
    within = []
    for i in range(len(rows)):
        keep = [j for j in range(len(rows)) if j != i]
        b, _ = _fit(form, [points[j] for j in keep], y[keep])
        within.append(float(form.x(points[i]) @ b + form.offset(points[i]) - y[i]))
    lev = [float(form.x(p) @ inv @ form.x(p)) for p in points]
    return Fitted(form=form, beta=beta, xtx_inv=inv, loo=loo, mean_leverage=float(np.mean(lev)),
                  n=len(rows), within=float(math.sqrt(np.mean(np.square(within)))))


def t_quantile(level: float, dof: int) -> float:
    """Student t's two-sided ``level`` quantile (Cornish-Fisher to 1/dof^2: within 0.5% for
    dof >= 5, the table's sizes)."""
    z = {0.95: 1.959964, 0.9: 1.644854, 0.68: 0.994458}.get(level)
    if z is None:
        raise ValueError(f"level: must be one of 0.68, 0.9, 0.95, but got {level}.")
    v = max(dof, 1)
    return z + (z**3 + z) / (4 * v) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v * v)


@dataclass(frozen=True, kw_only=True)
class Reading:
    """The prior at a point: ``value`` (an LR, or a batch in tokens per step) with its band at
    ``level`` and its sd in decades (for combining with other evidence)."""

    value: float
    band: tuple[float, float]
    sd: float
    level: float
    form: str
    what: str
    rows: int
    scatter: float
    team_offset: float = 0.0  # decades the team's own runs moved it

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "band": list(self.band), "sd_decades": self.sd,
                "level": self.level, "form": self.form, "law": self.what, "rows": self.rows,
                "loo_scatter_decades": self.scatter, "team_offset_decades": self.team_offset}


@dataclass(frozen=True, kw_only=True)
class Prior:
    """The table's chosen law of the peak LR and of the final batch (module docstring);
    ``scores``: every candidate's left-out scatter, for the reader to see the choice."""

    lr: Fitted
    batch: Fitted
    lr_scores: dict[str, float]
    batch_scores: dict[str, float]
    rows: tuple[PublishedRun, ...]
    left_out: tuple[PublishedRun, ...] = field(default=())  # flagged rows (optimizer, muP)
    team_shift: float = 0.0  # decades: the team's runs' shrunk mean miss (LR)
    team_shift_sd: float = 0.0

    def read_lr(self, p: RunPoint, level: float = LEVEL, *, placed: bool = False) -> Reading:
        """The LR at ``p``; ``placed``: the team's lab is placed among the table's by a
        measured offset (`tuner.modeling.anchor.offset`), so the between-lab scatter is left to
        that offset's own error. A team's own rows place it too."""
        placed = placed or any(r.team for r in self.rows)
        mu, sd = self.lr.predict(p, placed=placed)
        mu, sd = mu - self.team_shift, math.hypot(sd, self.team_shift_sd)
        return self._reading(self.lr, mu, sd, level, self.team_shift)

    def read_batch(self, p: RunPoint, level: float = LEVEL) -> Reading:
        mu, sd = self.batch.predict(p)
        return self._reading(self.batch, mu, sd, level, 0.0)

    def _reading(self, fit: Fitted, mu: float, sd: float, level: float,
                 shift: float) -> Reading:
        half = t_quantile(level, fit.n - len(fit.beta)) * sd
        return Reading(value=10**mu, band=(10 ** (mu - half), 10 ** (mu + half)), sd=sd,
                       level=level, form=fit.form.key, what=fit.form.what, rows=fit.n,
                       scatter=fit.scatter, team_offset=-shift)

    def summary(self) -> str:
        """The chosen forms and their scores, in one line."""
        lr = ", ".join(f"{k} {v:.3f}" for k, v in sorted(self.lr_scores.items(),
                                                           key=lambda kv: kv[1]))
        return (f"LR: {self.lr.form.key} ({self.lr.form.what}), left-out scatter "
                f"{self.lr.scatter:.3f} decades over {self.lr.n} recipes (every form: {lr}); "
                f"batch: {self.batch.form.key} ({self.batch.form.what}), "
                f"{self.batch.scatter:.3f} decades")

    def to_dict(self) -> dict[str, Any]:
        return {"lr_form": self.lr.form.key, "lr_law": self.lr.form.what,
                "lr_scatter_decades": self.lr.scatter, "lr_scores": self.lr_scores,
                "batch_form": self.batch.form.key, "batch_law": self.batch.form.what,
                "batch_scatter_decades": self.batch.scatter, "batch_scores": self.batch_scores,
                "recipes": [r.name for r in self.rows],
                "team_recipes": [r.name for r in self.rows if r.team],
                "left_out": {r.name: r.flag for r in self.left_out},
                "team_shift_decades": -self.team_shift, "source": SOURCE}


def _choose(forms: Sequence[Form], rows: Sequence[PublishedRun],
            value: Callable[[PublishedRun], float]) -> tuple[Fitted, dict[str, float]]:
    fits = [fit_form(f, rows, value) for f in forms]
    scores = {f.form.key: f.scatter for f in fits}
    return min(fits, key=lambda f: f.scatter), scores


def fit_prior(table: Sequence[PublishedRun], *,
              lr_forms: Sequence[Form] | None = None) -> Prior:
    """The prior from ``table``'s rows that an AdamW standard-parametrization prior may read.

    Raises:
        ValueError: fewer than 6 such rows (too few to choose a form by leaving one out).
    """
    rows = [r for r in table if r.in_prior]
    if len(rows) < 6:
        raise ValueError(f"recipes: a prior needs at least 6 AdamW standard-parametrization "
                         f"rows, but got {len(rows)}.")
    lr, lr_scores = _choose(lr_forms or LR_FORMS, rows, lambda r: r.lr)
    batch, b_scores = _choose(BATCH_FORMS, rows, lambda r: r.batch_end)
    shift, shift_sd = _team_shift(lr, rows)
    return Prior(lr=lr, batch=batch, lr_scores=lr_scores, batch_scores=b_scores,
                 rows=tuple(rows), left_out=tuple(r for r in table if not r.in_prior),
                 team_shift=shift, team_shift_sd=shift_sd)


def _team_shift(fit: Fitted, rows: Sequence[PublishedRun]) -> tuple[float, float]:
    """(decades to move the prior, its sd): the team's rows' mean left-out miss shrunk toward 0
    by k tau^2 / (k tau^2 + sigma^2), with tau^2 the between-family variance of the families'
    mean misses and sigma^2 the scatter of runs about their family (method of moments)."""
    team = [fit.loo[r.name] for r in rows if r.team]
    if not team:
        return 0.0, 0.0
    families: dict[str, list[float]] = {}
    for r in rows:
        families.setdefault("team" if r.team else r.family, []).append(fit.loo[r.name])
    within = [v - np.mean(vs) for vs in families.values() if len(vs) > 1 for v in vs]
    sigma2 = float(np.var(within)) if within else fit.scatter**2
    means = [float(np.mean(vs)) for vs in families.values()]
    per_family = float(np.mean([len(vs) for vs in families.values()]))
    tau2 = max(0.0, float(np.var(means)) - sigma2 / max(1.0, per_family))
    k = len(team)
    shrink = k * tau2 / (k * tau2 + sigma2) if tau2 > 0 else 0.0
    return shrink * float(np.mean(team)), math.sqrt(shrink * sigma2 / k)
