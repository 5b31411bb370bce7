"""Weighted fits with a scatter term and censored cells, shared by the lr laws' forms
(`lr_batch_law`'s log-linear one and `noise_scale`'s).

- `wls`: weighted least squares, coefficients and their covariance (X'WX)⁻¹.
- `tau2`: the cells' scatter about a law beyond their own noise, Paule and Mandel's moment
  estimate (the extra variance at which the weighted residuals' χ² equals its degrees of
  freedom, as in random-effects meta-regression); a nonlinear law passes its Jacobian as X.
- `impute_bounds`: one E-step of a censored regression (Tobin 1958): a cell that only bounds
  lr* takes the mean and variance of the law's normal at it, N(μ, se² + τ²), cut at the bound.
"""

from __future__ import annotations

import numpy as np


def wls(x: np.ndarray, y: np.ndarray, wt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weighted least squares: coefficients and their covariance (X'WX)⁻¹."""
    xtw = x.T * wt
    cov = np.linalg.pinv(xtw @ x)
    return cov @ xtw @ y, cov


def tau2(x: np.ndarray, y: np.ndarray, se2: np.ndarray) -> float:
    """Paule–Mandel τ² (module docstring); 0 when the cells' own noise already explains their
    scatter."""
    dof = len(y) - x.shape[1]

    def excess(t2: float) -> float:
        wt = 1.0 / (se2 + t2)
        beta, _ = wls(x, y, wt)
        return float(np.sum(wt * (y - x @ beta) ** 2) - dof)

    if dof < 1 or excess(0.0) <= 0:
        return 0.0
    lo, hi = 0.0, float(np.var(y)) + 1.0
    for _ in range(60):  # excess falls as τ² grows: bisect
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if excess(mid) > 0 else (lo, mid)
    return (lo + hi) / 2


def impute_bounds(y: np.ndarray, se2: np.ndarray, mu: np.ndarray, t2: float, side: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """For the bounded cells (``side`` −1: lr* at or below y, +1: at or above; all arrays are
    those cells'): the imputed y and se² (the cut normal's mean, and its variance less τ²,
    never below the cell's own se²)."""
    from scipy.stats import truncnorm

    sd = np.sqrt(se2 + t2)
    z = (y - mu) / sd
    lo = np.where(side > 0, z, -np.inf)
    hi = np.where(side < 0, z, np.inf)
    mean, var = truncnorm.stats(lo, hi, loc=mu, scale=sd, moments="mv")
    return (np.where(np.isfinite(mean), mean, y),
            np.maximum(np.where(np.isfinite(var), var, 0.0) - t2, se2))
