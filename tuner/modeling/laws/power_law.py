"""Power laws of a hyperparameter's optimum, fitted with a band, and the published ones.

A law ``v(x) = coef · x^exponent`` is a line in log-log space, fitted by least squares to each
budget's optimum (`tuner.modeling.laws.response_surface`). Its band comes from the budgets' own
bootstraps: replicate k fits the line through the k-th bootstrap minimizer of every budget plus
one of the line's own residuals drawn at random for each point, so the band at any x (the
held-out budget, the full run) is the spread of the replicates' predictions there — the optima's
measurement noise and their scatter about the line, carried through the fit and the
extrapolation. It does not cover a law that bends outside the fitted range; the extrapolation
distance (decades past the largest fitted x) is stated beside every use.

Published laws to hold a study's own against:

- DeepSeek LLM (Bi et al., 2024, arXiv:2401.02954, §3.1, eq. 1): η_opt = 0.3118·C^−0.1250,
  B_opt = 0.2920·C^0.3271 tokens, C = M·D (M: non-embedding FLOPs per token), fitted on
  1e17–2e19 FLOPs, standard parametrization.
- Step Law (Li et al., 2025, arXiv:2503.04715, eq. 5–6): η = 1.79·N^−0.713·D^0.307,
  B = 0.58·D^0.571 tokens (N non-embedding parameters, D tokens), 3,700 dense and MoE models.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tuner.modeling.laws.interface import LawChecks, LrLaw

DEEPSEEK_LLM_SOURCE = ("DeepSeek LLM (arXiv:2401.02954) eq. 1: eta_opt = 0.3118*C^-0.1250, "
                       "B_opt = 0.2920*C^0.3271 tokens")
STEP_LAW_SOURCE = ("Step Law (arXiv:2503.04715) eq. 5-6: eta = 1.79*N^-0.713*D^0.307, "
                   "B = 0.58*D^0.571 tokens")


@dataclass(frozen=True, kw_only=True)
class PowerLaw:
    """``value(x) = coef · x^exponent`` with bootstrap replicates of (log10 coef, exponent)."""

    coef: float
    exponent: float
    exponent_interval: tuple[float, float]
    x_min: float
    x_max: float
    replicates: tuple[tuple[float, float], ...]

    def at(self, x: float) -> float:
        return float(self.coef * x ** self.exponent)

    def band(self, x: float, level: float = 0.95) -> tuple[float, float]:
        """The replicates' central ``level`` interval of the law's value at ``x``."""
        logs = [a + b * math.log10(x) for a, b in self.replicates]
        q = (1 - level) / 2 * 100
        lo, hi = np.percentile(logs, [q, 100 - q])
        return float(10 ** lo), float(10 ** hi)

    def decades_past(self, x: float) -> float:
        """How far ``x`` lies beyond the fitted range, in decades (0 inside it)."""
        return max(0.0, math.log10(x / self.x_max), math.log10(self.x_min / x))

    def to_dict(self) -> dict[str, object]:
        return {"coef": self.coef, "exponent": self.exponent,
                "exponent_interval": list(self.exponent_interval), "x_min": self.x_min,
                "x_max": self.x_max}


@dataclass(frozen=True, kw_only=True)
class StudyLaw:
    """A law study's laws as the export uses them: in ``variable`` (``tokens`` under µP,
    ``compute`` = M·D in standard parametrization), with the held-out check's summary."""

    name: str
    variable: str
    lr: PowerLaw
    batch: PowerLaw | None = None
    held_out: dict[str, object] | None = None
    method: str = "per-budget"  # the lr law: "pooled" (`tuner.modeling.laws.pooled_law`) or a line
    lack_of_fit_p: float | None = None  # pooled: whether one power law holds (small: not)
    # the lr law in tokens and batch, when the study searched lr at 3 or more batches
    lr_batch: LrLaw | None = None

    def x(self, tokens: float, flops_per_token: float) -> float:
        return tokens if self.variable == "tokens" else flops_per_token * tokens

    def checks(self) -> LawChecks:
        """The study's held-out check, whether one power law held, whether it has a batch law
        (`tuner.modeling.laws.interface`)."""
        return LawChecks(origin="study", held_out=self.held_out,
                         lack_of_fit_p=self.lack_of_fit_p, batch_law=self.batch is not None)


def fit_power_law(x: Sequence[float], value: Sequence[float],
                  samples: Sequence[Sequence[float]]) -> PowerLaw:
    """Fit ``value ≈ coef · x^exponent`` through the points ``(x[i], value[i])``; ``samples[i]``
    are point i's bootstrap values (the band, module docstring).

    Raises:
        ValueError: fewer than 2 points, or x spanning one value.
    """
    lx, lv = np.log10(np.asarray(x, float)), np.log10(np.asarray(value, float))
    if len(lx) < 2 or np.ptp(lx) == 0:
        raise ValueError(f"a power law needs at least 2 distinct x, but got {list(x)}.")
    b, a = np.polyfit(lx, lv, 1)
    resid = lv - (a + b * lx)
    # the points' scatter about the line beyond what their own intervals allow (a law that does
    # not quite hold) enters each replicate as a resampled residual, scaled for the 2 fitted
    # coefficients; with 2 points there is no scatter to measure
    scale = math.sqrt(len(lx) / (len(lx) - 2)) if len(lx) > 2 else 0.0
    rng = np.random.default_rng(0)
    n = min(len(s) for s in samples)
    reps = []
    for k in range(n):
        ys = np.log10([s[k] for s in samples]) + scale * rng.choice(resid, len(lx))
        if np.all(np.isfinite(ys)):
            bk, ak = np.polyfit(lx, ys, 1)
            reps.append((float(ak), float(bk)))
    reps = reps or [(float(a), float(b))]
    slopes = [r[1] for r in reps]
    lo, hi = np.percentile(slopes, [2.5, 97.5])
    return PowerLaw(coef=float(10 ** a), exponent=float(b),
                    exponent_interval=(float(lo), float(hi)), x_min=float(10 ** lx.min()),
                    x_max=float(10 ** lx.max()), replicates=tuple(reps))


def deepseek_llm_lr(compute: float) -> float:
    """DeepSeek LLM's η_opt(C) (module docstring)."""
    return float(0.3118 * compute ** -0.1250)


def deepseek_llm_batch(compute: float) -> float:
    """DeepSeek LLM's B_opt(C) in tokens."""
    return float(0.2920 * compute ** 0.3271)


def step_law_lr(params: float, tokens: float) -> float:
    """Step Law's η(N, D) (module docstring)."""
    return float(1.79 * params ** -0.713 * tokens ** 0.307)


def step_law_batch(tokens: float) -> float:
    """Step Law's B(D) in tokens."""
    return float(0.58 * tokens ** 0.571)
