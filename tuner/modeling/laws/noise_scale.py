"""The noise-scale form of lr*(D, B): lr* grows with the batch below a noise scale B_noise(D)
and saturates above it, a nonlinear alternative to `lr_batch_law`'s log-linear form.

Notation as in `tuner.modeling.laws.lr_batch_law` (u, v, w: log10 D, B, N centred on the
fitted cells' mean). With z = p·(β + βD·u − v), log10 B_noise = β + βD·u (centred):

    log10 lr* = c0 + cD·u [+ cN·w] [+ cDD·u²] − log10(1 + 10^z)

- Why: below the noise scale an SGD step's useful size grows with the batch (lr ∝ B^p, p = 1
  for SGD, ½ for Adam's square-root rule), above it the gradient is already precise and lr*
  stops growing (McCandlish et al. 2018, arXiv:1812.06162; Filatov et al. 2024,
  arXiv:2410.05838); the critical batch grows with the data (Zhang et al. 2024,
  arXiv:2410.21676), so B_noise moves with D. At small batch the D-exponent is cD − p·βD
  (negative when the noise scale outgrows lr_max), at large batch cD: the bend Step Law's MoE
  sweep shows (benchmarks/RESULTS.md, "lr law in tokens and batch"), which a law linear in
  log D, log B and their product cannot make.
- Parameters (`NAMES`): "1", "u", "w" are lr_max's (as the log-linear law's), "b" and "bu"
  the noise scale's, "p" the exponent below it; "uu" a bend of lr_max in D (the band's
  alternative law, as the log-linear law's).
- Fit: nonlinear weighted least squares (scipy's trust-region `least_squares`, a few starts
  across the fitted batches for β) with weights 1 / (se² + τ²); τ² Paule–Mandel's on the fit
  linearised at its optimum (the Jacobian as the design matrix); censored cells as in the
  log-linear law (EM, each bound replaced by the law's normal cut there). The covariance is
  the linearised one, (J'WJ)⁻¹: the delta method.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tuner.modeling.laws import weighted

NAMES = ("1", "u", "b", "bu", "p")
NAMES_N = ("1", "u", "w", "b", "bu", "p")
P_RANGE = (0.1, 2.0)  # the exponent below the noise scale: √B (Adam) to B (SGD), with room
B_REACH = 3.0  # decades past the fitted batches the noise scale may be placed
LN10 = math.log(10.0)


@dataclass(frozen=True)
class Fit:
    """One noise-scale fit: its parameters over ``names``, covariance, τ², and the y and se²
    (censored cells imputed) it ended on."""

    names: tuple[str, ...]
    theta: np.ndarray
    cov: np.ndarray
    tau2: float
    y: np.ndarray
    se2: np.ndarray


def mean_and_grad(names: tuple[str, ...], theta: np.ndarray, u: np.ndarray, v: np.ndarray,
                  w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log10 lr* at each (u, v, w) and its gradient in the parameters, (n,) and (n, k)."""
    t = dict(zip(names, theta))
    gap = t["b"] + t["bu"] * u - v  # log10 B_noise − log10 B
    z = t["p"] * gap
    soft = np.logaddexp(0.0, z * LN10) / LN10  # log10(1 + 10^z)
    share = 1.0 / (1.0 + np.exp(-z * LN10))  # d soft / dz
    mean = t["1"] + t["u"] * u + t.get("w", 0.0) * w + t.get("uu", 0.0) * u * u - soft
    cols = {"1": np.ones_like(u), "u": u, "w": w, "uu": u * u, "b": -share * t["p"],
            "bu": -share * t["p"] * u, "p": -share * gap}
    return mean, np.stack([cols[n] for n in names], axis=1)


def fit(names: tuple[str, ...], u: np.ndarray, v: np.ndarray, w: np.ndarray, y: np.ndarray,
        se2: np.ndarray, side: np.ndarray, *, iterations: int = 50) -> Fit:
    """The weighted, censored fit of the form over ``names`` (module docstring)."""
    yy, ss, t2 = y.copy(), se2.copy(), 0.0
    cut = side != 0
    theta = _start(names, u, v, w, y, se2)
    for _ in range(iterations):
        theta = _least_squares(names, theta, u, v, w, yy, ss + t2)
        mu, jac = mean_and_grad(names, theta, u, v, w)
        new_t2 = weighted.tau2(jac, yy - mu + jac @ theta, ss)  # linearised at the optimum
        settled = abs(new_t2 - t2) < 1e-6
        t2 = new_t2
        if cut.any():
            new, ss[cut] = weighted.impute_bounds(y[cut], se2[cut], mu[cut], t2, side[cut])
            settled = settled and bool(np.max(np.abs(new - yy[cut])) < 1e-4)
            yy[cut] = new
        if settled:
            break
    theta = _least_squares(names, theta, u, v, w, yy, ss + t2)
    _, jac = mean_and_grad(names, theta, u, v, w)
    cov = np.linalg.pinv((jac.T / (ss + t2)) @ jac)
    return Fit(names=names, theta=theta, cov=cov, tau2=t2, y=yy, se2=ss)


def _least_squares(names: tuple[str, ...], theta: np.ndarray, u: np.ndarray, v: np.ndarray,
                   w: np.ndarray, y: np.ndarray, var: np.ndarray) -> np.ndarray:
    from scipy.optimize import least_squares

    sd = np.sqrt(var)
    lo, hi = _bounds(names, v)

    def resid(th: np.ndarray) -> np.ndarray:
        return np.asarray((mean_and_grad(names, th, u, v, w)[0] - y) / sd)

    def jac(th: np.ndarray) -> np.ndarray:
        return np.asarray(mean_and_grad(names, th, u, v, w)[1] / sd[:, None])

    return np.asarray(least_squares(resid, np.clip(theta, lo, hi), jac=jac, bounds=(lo, hi),
                                    method="trf").x)


def _bounds(names: tuple[str, ...], v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """p within `P_RANGE`, β within `B_REACH` decades of the fitted batches; the rest free."""
    lim = {"p": P_RANGE, "b": (float(v.min()) - B_REACH, float(v.max()) + B_REACH)}
    return (np.array([lim.get(n, (-np.inf, np.inf))[0] for n in names]),
            np.array([lim.get(n, (-np.inf, np.inf))[1] for n in names]))


def _start(names: tuple[str, ...], u: np.ndarray, v: np.ndarray, w: np.ndarray, y: np.ndarray,
           se2: np.ndarray) -> np.ndarray:
    """The best of a few starts: the noise scale at the smallest, middle and largest fitted
    batch and one past each end, lr_max from the cells at the largest batch."""
    best, best_rss = None, math.inf
    for b in np.linspace(float(v.min()) - 0.5, float(v.max()) + 0.5, 5):
        t0 = {"1": float(np.max(y)), "u": 0.0, "w": 0.0, "uu": 0.0, "b": float(b), "bu": 0.0,
              "p": 0.5}
        theta = _least_squares(names, np.array([t0[n] for n in names]), u, v, w, y, se2)
        r = mean_and_grad(names, theta, u, v, w)[0] - y
        rss = float(np.sum(r ** 2 / se2))
        if rss < best_rss:
            best, best_rss = theta, rss
    assert best is not None
    return best
