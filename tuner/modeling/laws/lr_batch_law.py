"""The optimal lr as a law in tokens and batch, lr*(D, B), fitted from cell optima, with a band
that carries the law's own misfit.

Notation: D tokens of training, B batch tokens per step, N non-embedding parameters; u = log10 D,
v = log10 B, w = log10 N, each centred on the fitted cells' mean (ū, v̄, w̄). A cell is one
(N, D, B) whose lr was searched; its optimum comes from a quadratic in log10 lr
(`tuner.modeling.laws.response_surface`) fitted to the trials within ``window`` decades of its best
trial (a bowl is quadratic near its bottom only: a diverged trial at 3x the best lr would pull a
quadratic over the whole searched range anywhere).

    log10 lr*(D, B) = c0 + cD·u + cB·v + cDB·u·v  [+ cN·w]            (log-linear)
    log10 lr*(D, B) = c0 + cD·u [+ cN·w] − log10(1 + (B_noise(D)/B)^p)   (noise-scale)

- Two forms, one chosen per fit (``shape``): both are fitted to the same cells (the same
  weights, τ and censored cells) and the one with the smaller AICc on them is lr*
  (`choose_shape`; a tie keeps the log-linear form). The noise-scale form
  (`tuner.modeling.laws.noise_scale`) saturates in B past a noise scale that moves with D; the
  log-linear one, below, bends in neither. Everything after this paragraph (the D x B term,
  censoring, τ, the band's mixture with a law bent in D, skew) holds for either form; the
  noise-scale form's variance at (D, B) is the delta method's, g'·Cov·g with g the gradient in
  its parameters, and its bent alternative adds c_DD·u² to log lr_max.
- Why this form (measured on Step Law's dense sweep, arXiv:2503.04715, benchmarks/RESULTS.md
  "lr law in tokens and batch"): there the D-exponent of lr* at a fixed batch changes sign across
  the batch range (negative at small batches, positive at large ones), which a product of power
  laws in D and B cannot express; the u·v term lets each batch have its own D-exponent, cD + cDB·v.
  With several N, N enters as a power (``cN``), not one law per N: a model size with one fitted
  D would otherwise have no D-dependence at all, and Step Law's own fit is a power in N.
- The D x B term only where the cells resolve it (|cDB| ≥ `RESOLVED_T` standard errors);
  otherwise it is left out of lr* (the law is refitted without it, ``left_out`` names it with
  its fitted value) and the band's alternative law keeps it (below). Far past the cells the
  term is multiplied by both distances: on this CPU's shipped grid it was unresolved in two
  seeds and, kept, moved their answers at the DeepSeek runs by decades, so the seeds disagreed
  there on a term neither had measured (benchmarks/RESULTS.md, "lr law in tokens and
  batch"). On Step Law's sweep it is resolved (t = 6–8 on every fitting subset) and stays.
- Censored cells: a cell whose best run sits on the searched lr range's edge gives a bound on
  its lr* (`Cell.bound`), not a value, and enters the fit as a censored observation (the EM
  algorithm of a censored regression, `_fit_bounded`). Left out instead, they hide where the
  law misses most: on Step Law's MoE sweep the smallest batch's optima fall below the searched
  range at the largest budgets, and without those cells the law's scatter τ read 0.054
  decades, with them 0.075 (benchmarks/RESULTS.md). A censored cell with no bound known (its
  quadratic's vertex on its window's edge) is left out.
- Fit: weighted least squares with weights 1 / (σ_i² + τ²), σ_i a cell's own standard error
  (its bootstrap minimizers' spread) and τ² the scatter of the cells about the law beyond their
  own noise: the law's lack of fit, estimated so that the weighted residuals' χ² equals its
  degrees of freedom (Paule and Mandel's moment estimate, as in random-effects
  meta-regression). ``lack_of_fit_p`` is the χ² test of τ² = 0 (small: the form does not
  describe the cells to within their noise, and τ carries the misfit into the band).
- Band: a prediction interval for lr* at (D, B) — the fit's own variance there, x'·Cov·x, which
  grows with the distance from the fitted cells in D and in B, plus τ² — averaged with a law
  that bends in D (the same form with u² added, and the D x B term where lr* left it out,
  `_bent`): the alternative is believed in the share ``bend_shrink`` = Q / (Q + k) that the
  cells tell its k extra terms from their noise (Q their Wald statistic; q² / (q² + se²) for the
  bend alone). The band is that of the two laws' mixture in that share (its centre
  moves toward the bent law by that share of their disagreement; its variance adds that share
  of the bent law's own extra variance and share·(1 − share) of the disagreement squared),
  stretched to hold lr* itself. lr* stays the
  fitted law's: a square in log D carried seven decades out moves lr* by orders of magnitude
  on a bend of a few hundredths, which is a reason for a wide band, not an answer. Within the
  fitted cells the two laws agree and nothing changes; past them a bend the cells show widens
  the band with the square of the distance, and a bend they cannot tell from noise does not.
  The bowls' shared asymmetry adds ``skew`` (how far a bowl with its own curvature on each side
  moves the cells' bottoms from the quadratics', `skew_shift`, averaged over the cells).
  Student's t with the fit's residual degrees of freedom. Checked on synthetic truths (asymmetric
  bowls, a law bent in D, lr–batch coupling that saturates past a critical batch;
  `tests/tuner/lr_batch_battery.py`, RESULTS.md "lr law in tokens and batch"): ≥ 90% of
  nominal-95% bands cover the truth at the held-out budget and batch and two decades past the
  fitted budgets, on every family. The band centred on the linear law, widened by the belief
  times the disagreement, covered a bend two decades out in 68–81% of draws; believing the bend
  in full covered it but widened a straight law's band there 2–5x.
- ``decades_past``: how far (D, B) lies beyond the fitted cells, in decades, in D and in B
  separately; the band is a model's beyond them, and every use states the distance.

The batch optimum B*(D): where a row of cells at one (N, D) has its lowest fitted loss at an
interior batch, a quadratic in log10 B through that batch and its two neighbours places B*; a
row whose best batch is the smallest or largest searched places none (the optimum lies beyond
the grid), and `fit_batch_optimum` says which and why.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuner.modeling.laws import noise_scale, weighted
from tuner.modeling.laws.interface import LawChecks
from tuner.modeling.laws.response_surface import MIN_TRIALS, Optimum, SurfaceError, fit_optimum

WINDOW = 0.5  # decades of lr either side of a cell's best trial that its quadratic is fitted to
MIN_CELLS = 6  # 4 or 5 coefficients and at least one degree of freedom for the scatter
TERMS = ("1", "u", "v", "uv")
RESOLVED_T = 2.0  # a term whose |coefficient / se| is below this, the cells do not tell from 0
TERMS_N = TERMS + ("w",)
BENT = ("uu",)  # the bent law: the form plus a bend in D
BOUNDS = {"upper": -1, "lower": 1}  # `Cell.bound`: the side of the bound lr* lies on
EM_ITERATIONS = 50  # a censored fit's imputation rounds (it settles in a few on Step Law's)
LOG_LINEAR, NOISE_SCALE, AUTO = "log-linear", "noise-scale", "auto"  # lr*'s forms (`shape`)
SHAPES = (AUTO, LOG_LINEAR, NOISE_SCALE)


@dataclass(frozen=True, kw_only=True)
class Cell:
    """One searched (N, D, B): its optimal lr and that optimum's standard error in decades."""

    tokens: float
    batch: float
    lr: float
    se: float  # standard error of log10 lr* (the cell's bootstrap spread)
    params: float = 0.0  # 0: one model size, the law has no N term
    loss: float = math.nan  # the fitted loss at the optimum (for the batch optimum)
    censored: bool = False  # the best trial sat on the searched lr range's edge
    # a censored cell's lr as a bound on lr*: "upper" (its best trial on the smallest lr
    # searched: lr* lies at or below it), "lower" (on the largest), "" (none known)
    bound: str = ""
    skew: float = 0.0  # `skew_shift` of the cell's bowl (decades)


class LawFitError(ValueError):
    """Too few cells, or cells that do not span D and B, for a law in tokens and batch."""


def cell_optimum(lrs: Sequence[float], losses: Sequence[float], *, window: float = WINDOW,
                 n_boot: int = 200, seed: int = 0) -> tuple[Optimum, bool]:
    """The optimum of one cell's trials at one batch: a quadratic in log10 lr fitted to the
    finite trials within ``window`` decades of the best one (module docstring), and whether the
    best trial sits on the edge of the searched lr range (censored: the optimum may lie
    beyond it).

    Raises:
        SurfaceError: fewer than `response_surface.MIN_TRIALS` trials in the window.
    """
    lr, z = np.asarray(lrs, float), np.asarray(losses, float)
    ok = np.isfinite(lr) & np.isfinite(z) & (lr > 0)
    lr, z = lr[ok], z[ok]
    if not len(z):
        raise SurfaceError("a cell needs finite trials, but got none.")
    x = np.log10(lr)
    best = x[int(np.argmin(z))]
    near = _window(x, best, window)
    censored = bool(best <= x.min() or best >= x.max())
    return (fit_optimum(lr[near], [1.0] * int(near.sum()), z[near], n_boot=n_boot, seed=seed),
            censored)


def skew_shift(lrs: Sequence[float], losses: Sequence[float], *,
               window: float = WINDOW) -> float:
    """How far (decades, signed) a bowl with its own curvature on each side,
    z = c + k₋·(x − m)² below m and k₊·(x − m)² above, over the same window as `cell_optimum`
    puts the bottom from where the quadratic does: a bowl steeper on one side (divergence above
    lr*) pulls the quadratic's vertex toward the gentle side. 0 when the quadratic has no
    bottom."""
    lr, z = np.asarray(lrs, float), np.asarray(losses, float)
    ok = np.isfinite(lr) & np.isfinite(z) & (lr > 0)
    x, z = np.log10(lr[ok]), z[ok]
    best = x[int(np.argmin(z))]
    near = _window(x, best, window)
    x, z = x[near] - best, z[near]
    if len(x) < MIN_TRIALS:
        return 0.0
    c2, c1, _ = np.polyfit(x, z, 2)
    if c2 <= 0:
        return 0.0
    quad = -c1 / (2 * c2)
    grid = np.linspace(x.min(), x.max(), 201)
    lo = np.where(x[None, :] < grid[:, None], (x[None, :] - grid[:, None]) ** 2, 0.0)
    hi = (x[None, :] - grid[:, None]) ** 2 - lo
    rss = []
    for a, b in zip(lo, hi):
        feats = np.stack([np.ones_like(x), a, b], axis=1)
        coef, *_ = np.linalg.lstsq(feats, z, rcond=None)
        r = z - feats @ coef
        rss.append(float(r @ r) if coef[1] >= 0 and coef[2] >= 0 else math.inf)
    if not np.isfinite(np.min(rss)):
        return 0.0
    return float(grid[int(np.argmin(rss))] - quad)


def _window(x: np.ndarray, best: float, window: float) -> np.ndarray:
    """The trials within ``window`` decades of the best, widened to the `MIN_TRIALS` nearest
    when fewer lie there (a best trial near the searched range's edge has one side only)."""
    dist = np.abs(x - best)
    near = dist <= window + 1e-9
    if near.sum() < MIN_TRIALS and len(x) >= MIN_TRIALS:
        near = dist <= np.sort(dist)[MIN_TRIALS - 1] + 1e-9
    return near


def censored_bound(lrs: Sequence[float], losses: Sequence[float]) -> str:
    """Which bound a cell's censored optimum gives on lr* (`Cell.bound`): "upper" when its best
    finite trial is at the smallest lr searched, "lower" at the largest, "" otherwise."""
    lr, z = np.asarray(lrs, float), np.asarray(losses, float)
    ok = np.isfinite(lr) & np.isfinite(z) & (lr > 0)
    if not ok.any():
        return ""
    lr, z = lr[ok], z[ok]
    best = lr[int(np.argmin(z))]
    return "upper" if best <= lr.min() else "lower" if best >= lr.max() else ""


def cell_from_optimum(opt: Optimum, *, tokens: float, batch: float, params: float = 0.0,
                      censored: bool = False, skew: float = 0.0, bound: str = "") -> Cell:
    """A `Cell` from a cell's fitted optimum; its se is the bootstrap minimizers' sd (floored
    at a hundredth of a decade, the grid the surfaces are minimized on)."""
    se = float(np.std([s[0] for s in opt.samples])) if opt.samples else 0.0
    return Cell(tokens=tokens, batch=batch, params=params, lr=opt.lr, se=max(se, 0.01),
                loss=opt.loss, censored=censored or "lr" in opt.at_edge, skew=skew,
                bound=bound)


@dataclass(frozen=True, kw_only=True)
class LrBatchLaw:
    """lr*(D, B) (module docstring): coefficients over `terms`, their covariance, τ, and the
    fitted cells' ranges. ``at``/``band``/``decades_past`` take tokens, batch tokens per step
    and, for a law with an N term, params."""

    terms: tuple[str, ...]
    coef: tuple[float, ...]
    cov: tuple[tuple[float, ...], ...]
    centre: tuple[float, float, float]  # ū, v̄, w̄ (log10)
    tau: float  # the cells' scatter about the law beyond their own noise (decades)
    skew: float  # the bowls' asymmetry: |mean skew_shift| + its standard error (decades)
    dof: int
    lack_of_fit_p: float
    form: tuple[float, ...]  # the alternative law's coefficients over `form_terms`
    form_cov: tuple[tuple[float, ...], ...]  # their covariance
    bend_shrink: float  # the share of belief in the alternative: Q / (Q + k) (`_bent`)
    tokens_range: tuple[float, float]
    batch_range: tuple[float, float]
    params_range: tuple[float, float] | None
    n_cells: int
    resid_sd: float  # the cells' rms residual about the law (decades)
    # the alternative law the band mixes in: `terms` + BENT, and the D x B term when it was
    # left out of `terms`
    form_terms: tuple[str, ...] = ()
    # (term, coefficient, se) of a term fitted and left out of lr* because the cells do not
    # resolve it (|t| < RESOLVED_T): the D x B term
    left_out: tuple[tuple[str, float, float], ...] = ()
    # which form lr* is: `LOG_LINEAR` (coefficients over TERMS) or `NOISE_SCALE` (parameters
    # over noise_scale.NAMES); the fit picks the one with the smaller AICc (`choose_shape`)
    shape: str = LOG_LINEAR
    aicc: tuple[tuple[str, float], ...] = ()  # (shape, AICc) of each form the fit compared

    def _mean_grad(self, tokens: float, batch: float, params: float | None,
                   bent: bool = False) -> tuple[float, np.ndarray]:
        """log10 lr* at (tokens, batch[, params]) and its gradient in the law's coefficients
        (``bent``: the alternative law's): the row of the design matrix for the log-linear
        form, the Jacobian's for the noise-scale one."""
        u = math.log10(tokens) - self.centre[0]
        v = math.log10(batch) - self.centre[1]
        w = 0.0
        if "w" in self.terms:
            if not params:
                raise ValueError("params: this law has an N term and needs the model's "
                                 f"non-embedding parameters, but got {params!r}")
            w = math.log10(params) - self.centre[2]
        names = (self.form_terms or self.terms + BENT) if bent else self.terms
        coef = np.asarray(self.form if bent else self.coef)
        if self.shape == NOISE_SCALE:
            mean, grad = noise_scale.mean_and_grad(names, coef, *np.array([[u], [v], [w]]))
            return float(mean[0]), grad[0]
        vals = {"1": 1.0, "u": u, "v": v, "uv": u * v, "uu": u * u, "vv": v * v, "w": w}
        x = np.array([vals[t] for t in names])
        return float(x @ coef), x

    def _linear_and_bent(self, tokens: float, batch: float, params: float | None
                         ) -> tuple[float, float, float, float]:
        """At (tokens, batch): the law's log10 lr* and variance (the delta method's for the
        noise-scale form), the bent law's disagreement with it, and the bent law's variance
        beyond the law's."""
        mid, g = self._mean_grad(tokens, batch, params)
        bent, gb = self._mean_grad(tokens, batch, params, bent=True)
        var = float(g @ np.asarray(self.cov) @ g)
        extra = max(0.0, float(gb @ np.asarray(self.form_cov) @ gb) - var)
        return mid, var, bent - mid, extra

    def log_at(self, tokens: float, batch: float, params: float | None = None) -> float:
        """log10 lr*: the fitted (linear) law's."""
        return self._linear_and_bent(tokens, batch, params)[0]

    def at(self, tokens: float, batch: float, params: float | None = None) -> float:
        """lr* at ``tokens`` trained with ``batch`` tokens per step."""
        return float(10 ** self.log_at(tokens, batch, params))

    def _mixture(self, tokens: float, batch: float, params: float | None
                 ) -> tuple[float, float]:
        """The mixture of the linear and the bent law (module docstring): its log10 lr* and
        its standard deviation in decades, τ and the bowls' asymmetry included."""
        mid, var, diff, extra = self._linear_and_bent(tokens, batch, params)
        w = self.bend_shrink
        return mid + w * diff, math.sqrt(var + w * extra + w * (1 - w) * diff ** 2
                                         + self.tau ** 2 + self.skew ** 2)

    def readings(self, tokens: float, batch: float, params: float | None = None
                 ) -> dict[str, float]:
        """lr* at (tokens, batch) as three readings of the cells: the law's own (``linear``, the
        answer), the law bent in D (``bent``, the band's alternative) and the band's mixture
        of the two (``mixture``, its centre)."""
        mid, _, diff, _ = self._linear_and_bent(tokens, batch, params)
        centre, _ = self._mixture(tokens, batch, params)
        return {"linear": float(10 ** mid), "bent": float(10 ** (mid + diff)),
                "mixture": float(10 ** centre)}

    def band(self, tokens: float, batch: float, params: float | None = None,
             level: float = 0.95) -> tuple[float, float]:
        """The central ``level`` prediction interval of lr* at (tokens, batch): the mixture's,
        stretched to hold the law's own lr* where the bend moves the mixture off it."""
        from scipy.stats import t as student_t

        centre, sd = self._mixture(tokens, batch, params)
        half = float(student_t.ppf(0.5 + level / 2, max(1, self.dof))) * sd
        mid = self.log_at(tokens, batch, params)
        return float(10 ** min(centre - half, mid)), float(10 ** max(centre + half, mid))

    def decades_past(self, tokens: float, batch: float) -> dict[str, float]:
        """How far (tokens, batch) lies beyond the fitted cells, in decades: ``tokens`` and
        ``batch`` separately (0 inside the fitted range)."""
        return {"tokens": _past(tokens, self.tokens_range),
                "batch": _past(batch, self.batch_range)}

    @property
    def name(self) -> str:
        return "lr*(D, B)"

    def checks(self) -> LawChecks:
        """A law study's lr*(D, B): its band carries model-form error (the mixture with the law
        bent in D); its study's `StudyLaw` holds the other checks
        (`tuner.modeling.laws.interface`)."""
        return LawChecks(origin="study", form_error=True)

    def interaction(self, tokens: float, batch: float) -> dict[str, Any] | None:
        """The D x B term at (tokens, batch): its coefficient, standard error and t, whether
        the cells resolve it (|t| >= `RESOLVED_T`), and the decades it adds to log10 lr* there.
        Far past the cells this term is multiplied by both distances, so an answer can rest on
        a term the grid did not measure; None for a law without it."""
        u = math.log10(tokens) - self.centre[0]
        v = math.log10(batch) - self.centre[1]
        gone = {name: (c, s) for name, c, s in self.left_out}
        left_out = "uv" in gone  # fitted, unresolved, left out of lr*: it gives 0 decades here
        if left_out:
            coef, se = gone["uv"]
        elif "uv" in self.terms:
            i = self.terms.index("uv")
            coef, se = self.coef[i], math.sqrt(max(self.cov[i][i], 0.0))
        else:
            return None
        t = coef / se if se > 0 else math.inf
        return {"coef": coef, "se": se, "t": t, "resolved": abs(t) >= RESOLVED_T,
                "left_out": left_out, "decades": 0.0 if left_out else coef * u * v,
                "decades_if_kept": coef * u * v}

    def tokens_exponent(self, batch: float) -> float:
        """d log lr* / d log D at ``batch`` (the u·v term makes it depend on the batch; the
        noise-scale form's also depends on D and is taken at the fitted cells' mean D and N)."""
        if self.shape == NOISE_SCALE:
            return self._slope(10 ** self.centre[0], batch, along=0)
        c = dict(zip(self.terms, self.coef))
        return c["u"] + c.get("uv", 0.0) * (math.log10(batch) - self.centre[1])

    def batch_exponent(self, tokens: float) -> float:
        """d log lr* / d log B at ``tokens`` (the noise-scale form's at the cells' mean B and
        N)."""
        if self.shape == NOISE_SCALE:
            return self._slope(tokens, 10 ** self.centre[1], along=1)
        c = dict(zip(self.terms, self.coef))
        return c["v"] + c.get("uv", 0.0) * (math.log10(tokens) - self.centre[0])

    def _slope(self, tokens: float, batch: float, *, along: int) -> float:
        """A central difference of log10 lr* in log10 D (``along`` 0) or log10 B (1)."""
        h, n = 1e-3, 10 ** self.centre[2] if "w" in self.terms else None
        step = (10 ** h, 1.0) if along == 0 else (1.0, 10 ** h)
        up = self.log_at(tokens * step[0], batch * step[1], n)
        down = self.log_at(tokens / step[0], batch / step[1], n)
        return (up - down) / (2 * h)

    def to_dict(self) -> dict[str, Any]:
        return {"form": self.describe(), "shape": self.shape,
                "aicc": [{"shape": f, "aicc": a} for f, a in self.aicc],
                "form_terms": list(self.form_terms or self.terms + BENT),
                "left_out_terms": [{"term": t, "coef": c, "se": s} for t, c, s in self.left_out],
                "terms": list(self.terms), "coef": list(self.coef),
                "cov": [list(r) for r in self.cov], "centre": list(self.centre),
                "tau": self.tau, "skew": self.skew, "dof": self.dof,
                "lack_of_fit_p": self.lack_of_fit_p,
                "bent_coef": list(self.form), "bent_cov": [list(r) for r in self.form_cov],
                "bend_shrink": self.bend_shrink,
                "tokens_range": list(self.tokens_range),
                "batch_range": list(self.batch_range),
                "params_range": list(self.params_range) if self.params_range else None,
                "n_cells": self.n_cells, "resid_sd": self.resid_sd}

    def describe(self) -> str:
        """The form in words (law.json's ``form``)."""
        n = " and log N" if "w" in self.terms else ""
        if self.shape == NOISE_SCALE:
            return (f"noise-scale: lr_max(D{', N' if n else ''}) / (1 + (B_noise(D) / B)^p), "
                    "log lr_max and log B_noise linear in log D" + n)
        return ("log-linear in log D, log B" + (" with a D x B term" if "uv" in self.terms
                                                 else "") + n)

    def notes(self) -> list[str]:
        """A law study's law.md: its exponents at the fitted cells' edges, its scatter, and what
        its band carries past the cells (the mixture with the bent law, the bowls' asymmetry)."""
        (d0, d1), (b0, b1) = self.tokens_range, self.batch_range
        return [
            f"D-exponent of lr*: {self.tokens_exponent(b0):+.3f} at B = {b0:.4g}, "
            f"{self.tokens_exponent(b1):+.3f} at B = {b1:.4g}; B-exponent "
            f"{self.batch_exponent(d0):+.3f} at D = {d0:.4g}, {self.batch_exponent(d1):+.3f} "
            f"at D = {d1:.4g}.",
            f"Scatter beyond the cells' noise τ = {self.tau:.3g} decades (lack of fit p = "
            f"{_g(self.lack_of_fit_p)}).",
            "Past the cells, lr* and its band are the mixture of this law and one bent in D, "
            "the bend believed in the share the cells tell it from their noise "
            f"({self.bend_shrink:.0%}); the band also carries the bowls' asymmetry "
            f"({self.skew:.3g} decades)."]

    def term_lines(self, full_run: tuple[float, float] | None) -> list[str]:
        """A law study's law.md: whether the cells resolve the D x B term, and what it gives at
        the full run's (tokens, batch): far out it is multiplied by both distances, so it can
        decide the answer there."""
        here = self.interaction(self.tokens_range[1], self.batch_range[1])
        if here is None:
            return []
        line = (f"The D x B term is {here['coef']:+.3f} ± {here['se']:.3f} (|t| = "
                f"{abs(here['t']):.1f}): "
                + ("the cells resolve it." if here["resolved"] else
                   "the cells do not tell it from zero, so lr* leaves it out (|t| < "
                   f"{RESOLVED_T:g}) and the band mixes in the law that keeps it."))
        if full_run is not None:
            tokens, batch = full_run
            far = self.interaction(tokens, batch)
            assert far is not None
            where = f"At the full run ({tokens:.3g} tokens, {batch:.4g} tokens per step)"
            line += (f" {where} it gives {far['decades']:+.2f} decades of log10 lr*."
                     if not far["left_out"] else
                     f" {where} it would give {far['decades_if_kept']:+.2f} decades of log10 "
                     "lr*: a part of the answer the grid did not measure.")
        return ["", line]

    def formula(self) -> str:
        """A table's law.md: the chosen form (`describe`); the log-linear one with its terms
        spelled out and the fitted cells' mean they are centred on."""
        if self.shape != LOG_LINEAR:
            return f"Modeled: lr*(D, B) {self.describe()} (the form the fit chose by AICc)."
        w = "w" in self.terms
        return ("Modeled: lr*(D, B) = 10^(c0 + cD·u + cB·v + cDB·u·v" + (" + cN·w" if w else "")
                + ("), u, v, w = log10 D, B, N" if w else "), u, v = log10 D, B")
                + " minus the fitted cells' mean ("
                + f"{', '.join(_g(10 ** c) for c in self.centre[:3 if w else 2])}).")

    def coefficient_lines(self) -> list[str]:
        """A table's law.md: the coefficients by term, the residual, τ and the lack of fit."""
        return ["| term | coefficient |", "|---|---|",
                *[f"| {t} | {_g(c, '.4f')} |" for t, c in zip(self.terms, self.coef)], "",
                f"Cells fitted: {self.n_cells} (their lr optimum inside the searched range); "
                f"rms residual {_g(self.resid_sd)} decades; scatter beyond the cells' own noise "
                f"τ = {_g(self.tau)} decades (lack of fit p = {_g(self.lack_of_fit_p)}: "
                "small means the form misses the cells by more than their noise, and τ carries "
                "that into the band).", ""]

    def fit_summary(self) -> str:
        return (f"{self.n_cells} cells, tau {self.tau:.3g} decades, lack of fit p "
                f"{self.lack_of_fit_p:.3g}")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LrBatchLaw:
        """The law `to_dict` wrote (law.json's ``lr_batch_law``); one written before the
        noise-scale form existed has no ``shape`` and is log-linear."""
        pr = d.get("params_range")
        return cls(terms=tuple(d["terms"]), coef=tuple(float(c) for c in d["coef"]),
                   cov=tuple(tuple(float(c) for c in r) for r in d["cov"]),
                   centre=tuple(float(c) for c in d["centre"]),  # type: ignore[arg-type]
                   tau=float(d["tau"]), skew=float(d.get("skew", 0.0)), dof=int(d["dof"]),
                   lack_of_fit_p=float(d["lack_of_fit_p"]),
                   form=tuple(float(c) for c in d["bent_coef"]),
                   form_cov=_bent_cov(d),
                   bend_shrink=float(d["bend_shrink"]),
                   tokens_range=_pair(d["tokens_range"]), batch_range=_pair(d["batch_range"]),
                   params_range=_pair(pr) if pr else None, n_cells=int(d["n_cells"]),
                   resid_sd=float(d["resid_sd"]),
                   form_terms=tuple(d.get("form_terms") or tuple(d["terms"]) + BENT),
                   left_out=tuple((str(x["term"]), float(x["coef"]), float(x["se"]))
                                  for x in d.get("left_out_terms", ())),
                   shape=str(d.get("shape", LOG_LINEAR)),
                   aicc=tuple((str(x["shape"]), float(x["aicc"])) for x in d.get("aicc", ())))


def fit_lr_batch_law(cells: Sequence[Cell], *, shape: str = AUTO) -> LrBatchLaw:
    """The law through ``cells``, a censored one as the bound it gives (module docstring).
    Cells at more than one N give the law an N term; the ranges are those of the cells whose
    optimum is inside the searched range. ``shape``: `AUTO` fits both forms and keeps the one
    with the smaller AICc (`choose_shape`), `LOG_LINEAR` or `NOISE_SCALE` fits that one.

    Raises:
        LawFitError: fewer than `MIN_CELLS` uncensored cells (more than the terms), or cells
            spanning fewer than 2 token budgets or 2 batches (3 for the noise-scale form).
        ValueError: an unknown ``shape``.

        >>> law = fit_lr_batch_law(cells)  # doctest: +SKIP
        >>> law.at(1e11, 2**21), law.band(1e11, 2**21), law.decades_past(1e11, 2**21)
        ... # doctest: +SKIP
    """
    if shape not in SHAPES:
        raise ValueError(f"shape: must be one of {', '.join(SHAPES)}, but got {shape!r}")
    data = _Cells.of(cells)
    linear = _fit_log_linear(data) if shape != NOISE_SCALE else None
    batches = len({c.batch for c in data.inside})
    if shape == LOG_LINEAR or (shape == AUTO and batches < 3):
        assert linear is not None
        return linear
    if batches < 3:
        raise LawFitError(f"cells: the noise-scale form needs at least 3 distinct batch, "
                          f"but got {batches}")
    noisy = _fit_noise_scale(data)
    return choose_shape(linear, noisy, data) if linear is not None else noisy


@dataclass(frozen=True)
class _Cells:
    """The cells a law is fitted to, as arrays: centred logs, log10 lr, se², bound sides."""

    kept: list[Cell]
    inside: list[Cell]
    with_n: bool
    centre: np.ndarray
    u: np.ndarray
    v: np.ndarray
    w: np.ndarray
    y: np.ndarray
    se2: np.ndarray
    side: np.ndarray

    @classmethod
    def of(cls, cells: Sequence[Cell]) -> _Cells:
        kept = [c for c in cells if c.lr > 0 and (not c.censored or c.bound in BOUNDS)]
        inside = [c for c in kept if not c.censored]
        with_n = len({c.params for c in kept}) > 1
        need = max(MIN_CELLS, len(TERMS_N if with_n else TERMS) + 2)
        for name, vals in (("tokens", {c.tokens for c in inside}),
                           ("batch", {c.batch for c in inside})):
            if len(vals) < 2:
                raise LawFitError(f"cells: a law in tokens and batch needs at least 2 distinct "
                                  f"{name}, but got {sorted(vals)}")
        if len(inside) < need:
            raise LawFitError(f"cells: a law in tokens and batch needs at least {need} cells "
                              f"whose lr optimum is inside the searched range, but got "
                              f"{len(inside)}")
        logs = np.log10([[c.tokens, c.batch, c.params if with_n else 1.0] for c in kept])
        centre = logs.mean(axis=0)
        u, v, w = (logs - centre).T
        return cls(kept=kept, inside=inside, with_n=with_n, centre=centre, u=u, v=v, w=w,
                   y=np.log10([c.lr for c in kept]),
                   se2=np.array([c.se for c in kept]) ** 2,
                   side=np.array([BOUNDS.get(c.bound, 0) if c.censored else 0 for c in kept]))

    def common(self) -> dict[str, Any]:
        """The law's fields that do not depend on its form."""
        params = [c.params for c in self.kept]
        return {"centre": (float(self.centre[0]), float(self.centre[1]),
                           float(self.centre[2]) if self.with_n else 0.0),
                "skew": _skew([c.skew for c in self.inside]),
                "tokens_range": (min(c.tokens for c in self.inside),
                                 max(c.tokens for c in self.inside)),
                "batch_range": (min(c.batch for c in self.inside),
                                max(c.batch for c in self.inside)),
                "params_range": (min(params), max(params)) if self.with_n else None,
                "n_cells": len(self.kept)}


def _fit_log_linear(data: _Cells) -> LrBatchLaw:
    """The log-linear form (module docstring), the D x B term only where the cells resolve it."""
    terms: tuple[str, ...] = TERMS_N if data.with_n else TERMS
    u, v, w = data.u, data.v, data.w
    cols = {"1": np.ones_like(u), "u": u, "v": v, "uv": u * v, "w": w, "uu": u * u, "vv": v * v}

    def fit(names: tuple[str, ...]
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, np.ndarray, np.ndarray]:
        x = np.stack([cols[t] for t in names], axis=1)
        return (x, *_fit_bounded(x, data.y, data.se2, data.side))

    x, beta, cov, tau2, y, se2 = fit(terms)
    left_out: tuple[tuple[str, float, float], ...] = ()
    i = terms.index("uv")
    uv, uv_se = float(beta[i]), math.sqrt(max(float(cov[i, i]), 0.0))
    if abs(uv) < RESOLVED_T * uv_se:  # the cells do not tell the D x B term from zero
        left_out = (("uv", uv, uv_se),)
        terms = tuple(t for t in terms if t != "uv")
        x, beta, cov, tau2, y, se2 = fit(terms)
    form_terms = terms + tuple(t for t, _, _ in left_out) + BENT
    xb = np.stack([cols[t] for t in form_terms], axis=1)
    bent, bent_cov, shrink = _bent(xb, y, 1.0 / (se2 + tau2), beta)
    resid = y - x @ beta
    q0 = float(np.sum(resid ** 2 / se2))
    dof = len(y) - len(terms)
    return LrBatchLaw(
        terms=terms, coef=tuple(beta.tolist()), cov=tuple(map(tuple, cov.tolist())),
        tau=math.sqrt(float(tau2)), dof=dof, lack_of_fit_p=_chi2_p(q0, dof),
        form=tuple(bent.tolist()), form_cov=tuple(map(tuple, bent_cov.tolist())),
        bend_shrink=shrink, form_terms=form_terms, left_out=left_out,
        resid_sd=float(np.sqrt(np.mean(resid ** 2))), **data.common())


def _fit_noise_scale(data: _Cells) -> LrBatchLaw:
    """The noise-scale form (`noise_scale`), its band's alternative the same form bent in D
    (a u² term in log lr_max), believed as the log-linear law's bend is (`_bent`)."""
    names = noise_scale.NAMES_N if data.with_n else noise_scale.NAMES
    args = (data.u, data.v, data.w)
    law = noise_scale.fit(names, *args, data.y, data.se2, data.side)
    bent = noise_scale.fit(names + BENT, *args, data.y, data.se2, data.side)
    q = bent.theta[-1] ** 2 / bent.cov[-1, -1] if bent.cov[-1, -1] > 0 else 0.0
    mu, _ = noise_scale.mean_and_grad(names, law.theta, *args)
    resid = law.y - mu
    dof = len(data.y) - len(names)
    return LrBatchLaw(
        terms=names, coef=tuple(law.theta.tolist()), cov=tuple(map(tuple, law.cov.tolist())),
        tau=math.sqrt(law.tau2), dof=dof,
        lack_of_fit_p=_chi2_p(float(np.sum(resid ** 2 / law.se2)), dof),
        form=tuple(bent.theta.tolist()), form_cov=tuple(map(tuple, bent.cov.tolist())),
        bend_shrink=float(q / (q + 1)), form_terms=names + BENT, shape=NOISE_SCALE,
        resid_sd=float(np.sqrt(np.mean(resid ** 2))), **data.common())


def choose_shape(linear: LrBatchLaw, noisy: LrBatchLaw, data: _Cells) -> LrBatchLaw:
    """The form with the smaller AICc on the cells (−2 log-likelihood + 2k + 2k(k+1)/(n−k−1),
    k the form's coefficients and τ, n the cells): each cell's likelihood under the form's
    normal N(μ, se² + τ²), a censored cell's the probability of its side of the bound. AICc
    estimates the held-out deviance, so a form wins by fitting cells it was not tuned to
    better, not by having more parameters; on a tie the log-linear form stays."""
    scores = [_aicc(data.y, data.se2, data.side,
                    np.array([law.log_at(c.tokens, c.batch, c.params or None)
                              for c in data.kept]), tau=law.tau, k=len(law.terms) + 1)
              for law in (linear, noisy)]
    aicc = ((LOG_LINEAR, scores[0]), (NOISE_SCALE, scores[1]))
    best = noisy if scores[1] < scores[0] else linear
    return dataclasses.replace(best, aicc=aicc)


def cells_aicc(cells: Sequence[Cell], log_at: Callable[[Cell], float], *, tau: float,
               k: int) -> float:
    """A law's AICc on ``cells`` (`choose_shape`'s measure, so every form of lr* is judged on
    one scale, `tuner.modeling.laws.forms`): ``log_at`` its log10 lr* at a cell, ``tau`` its
    scatter beyond the cells' noise, ``k`` its coefficients and τ. The cells a fit keeps are
    scored: those with an lr, a censored one only with the side of its bound known."""
    kept = [c for c in cells if c.lr > 0 and (not c.censored or c.bound in BOUNDS)]
    side = np.array([BOUNDS.get(c.bound, 0) if c.censored else 0 for c in kept])
    return _aicc(np.log10([c.lr for c in kept]), np.array([c.se for c in kept]) ** 2, side,
                 np.array([log_at(c) for c in kept]), tau=tau, k=k)


def law_aicc(law: LrBatchLaw, cells: Sequence[Cell]) -> float:
    """lr*(D, B)'s AICc on ``cells`` (`cells_aicc`): its chosen shape's coefficients and τ."""
    return cells_aicc(cells, lambda c: law.log_at(c.tokens, c.batch, c.params or None),
                      tau=law.tau, k=len(law.terms) + 1)


def _aicc(y: np.ndarray, se2: np.ndarray, side: np.ndarray, mu: np.ndarray, *, tau: float,
          k: int) -> float:
    """−2 log-likelihood + 2k + 2k(k+1)/(n−k−1) of the cells ``y`` (log10 lr*, variance
    ``se2``, ``side`` of a bound or 0) under the law's normal N(``mu``, se² + τ²)."""
    from scipy.stats import norm

    sd = np.sqrt(se2 + tau ** 2)
    z = (y - mu) / sd
    ll = np.where(side == 0, norm.logpdf(z) - np.log(sd),
                  norm.logcdf(np.where(side < 0, z, -z)))
    n = len(y)
    return float(-2 * ll.sum() + 2 * k + 2 * k * (k + 1) / max(n - k - 1, 1))


def _fit_bounded(x: np.ndarray, y: np.ndarray, se2: np.ndarray, side: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, float, np.ndarray, np.ndarray]:
    """The weighted fit (coefficients, covariance, τ²) with each bounded cell (``side`` −1:
    lr* at or below its y, +1: at or above) taken as a censored observation: its y and
    variance replaced by the mean and variance of the law's normal at that cell, N(x·β,
    se² + τ²), cut at the bound, and the fit repeated until they settle (the EM algorithm for
    a censored regression, Tobin 1958). Also returns the y and se² the last fit used."""
    yy, ss = y.copy(), se2.copy()
    cut = side != 0
    for _ in range(EM_ITERATIONS):
        tau2 = weighted.tau2(x, yy, ss)
        beta, cov = weighted.wls(x, yy, 1.0 / (ss + tau2))
        if not cut.any():
            break
        new, ss[cut] = weighted.impute_bounds(y[cut], se2[cut], (x @ beta)[cut], tau2,
                                              side[cut])
        done = bool(np.max(np.abs(new - yy[cut])) < 1e-4)
        yy[cut] = new
        if done:
            break
    return beta, cov, tau2, yy, ss


def _bent(xb: np.ndarray, y: np.ndarray, wt: np.ndarray, beta: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray, float]:
    """The alternative law's coefficients (``xb``: the law's terms, then its extra ones), their
    covariance and the belief in it, Q / (Q + k) for the Wald statistic Q of its k extra
    coefficients (q² / (q² + se²) for one, the bend alone): extra terms the cells cannot tell
    from their noise would otherwise widen the band two decades out by their noise alone
    (×7–×45 on the synthetic truths at noise sd 0.05–0.07, RESULTS.md)."""
    k, extra = xb.shape[1], xb.shape[1] - len(beta)
    if len(y) <= k:
        return np.concatenate([beta, np.zeros(extra)]), np.zeros((k, k)), 0.0
    bent, cov = weighted.wls(xb, y, wt)
    b, c = bent[-extra:], cov[-extra:, -extra:]
    q = float(b @ np.linalg.pinv(c) @ b)
    return bent, cov, q / (q + extra) if q + extra > 0 else 0.0


def _bent_cov(d: Mapping[str, Any]) -> tuple[tuple[float, ...], ...]:
    """The bent law's covariance from law.json; a law.json written before it was stored
    (2026-12) has none: zeros, so its band is the mixture's without the bent law's own
    variance."""
    if "bent_cov" in d:
        return tuple(tuple(float(c) for c in r) for r in d["bent_cov"])
    k = len(d["bent_coef"])
    return tuple((0.0,) * k for _ in range(k))


def _skew(shifts: list[float]) -> float:
    """The bowls' shared asymmetry as a bias of the quadratic optima: |mean| + standard error
    of the cells' `skew_shift` (a bias the same in every cell moves the whole law, so it does
    not average out the way a cell's noise does)."""
    if len(shifts) < 2:
        return 0.0
    s = np.asarray(shifts)
    return float(abs(s.mean()) + s.std(ddof=1) / math.sqrt(len(s)))


def _chi2_p(stat: float, dof: int) -> float:
    from scipy.stats import chi2

    return float(chi2.sf(stat, dof)) if dof > 0 else math.nan


def _past(x: float, span: tuple[float, float]) -> float:
    return max(0.0, math.log10(x / span[1]), math.log10(span[0] / x))


def _g(v: float, fmt: str = ".3g") -> str:
    """A number for law.md; "—" where it is not finite (a τ test with no degrees of freedom)."""
    return "—" if not math.isfinite(v) else format(v, fmt)


def _pair(v: Sequence[Any]) -> tuple[float, float]:
    return float(v[0]), float(v[1])


@dataclass(frozen=True, kw_only=True)
class BatchOptimum:
    """B*(D): each row's placed batch optimum, and the power law through them when at least 2
    token budgets place one; ``reason`` says why there is no law."""

    rows: tuple[dict[str, Any], ...]  # tokens, params, batch (None: not placed), why
    coef: float | None = None
    exponent: float | None = None
    reason: str = ""

    def at(self, tokens: float) -> float | None:
        if self.coef is None or self.exponent is None:
            return None
        return float(self.coef * tokens ** self.exponent)

    def to_dict(self) -> dict[str, Any]:
        return {"rows": list(self.rows), "coef": self.coef, "exponent": self.exponent,
                "reason": self.reason}


def fit_batch_optimum(cells: Sequence[Cell]) -> BatchOptimum:
    """B*(D) from the cells' fitted losses (module docstring): per (N, D) row, a quadratic in
    log10 B through the best batch and its two neighbours when the best is interior."""
    rows = []
    for key in sorted({(c.params, c.tokens) for c in cells}):
        row = sorted((c for c in cells if (c.params, c.tokens) == key and math.isfinite(c.loss)),
                     key=lambda c: c.batch)
        rows.append({"params": key[0], "tokens": key[1]} | _row_optimum(row))
    placed = [r for r in rows if r["batch"] is not None]
    one_n = len({r["params"] for r in placed}) <= 1
    if len({r["tokens"] for r in placed}) < 2 or not one_n:
        why = ("fewer than 2 token budgets place an interior batch optimum" if one_n else
               "the rows that place one are at several model sizes (no law in N is fitted)")
        return BatchOptimum(rows=tuple(rows), reason=why)
    b, a = np.polyfit(np.log10([r["tokens"] for r in placed]),
                      np.log10([r["batch"] for r in placed]), 1)
    return BatchOptimum(rows=tuple(rows), coef=float(10 ** a), exponent=float(b))


def _row_optimum(row: list[Cell]) -> dict[str, Any]:
    if len(row) < 3:
        return {"batch": None, "why": f"{len(row)} batches searched (3 needed)"}
    i = int(np.argmin([c.loss for c in row]))
    if i == 0:
        return {"batch": None, "why": f"best at the smallest batch searched ({row[0].batch:.4g})"}
    if i == len(row) - 1:
        return {"batch": None, "why": f"best at the largest batch searched ({row[-1].batch:.4g})"}
    v = np.log10([c.batch for c in row[i - 1:i + 2]])
    z = [c.loss for c in row[i - 1:i + 2]]
    a2, a1, _ = np.polyfit(v, z, 2)
    vb = -a1 / (2 * a2) if a2 > 0 else v[1]
    return {"batch": float(10 ** float(np.clip(vb, v[0], v[2]))), "why": ""}
