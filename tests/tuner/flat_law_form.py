"""A second lr* law form for the tests of `tuner.modeling.laws.forms`: lr* flat in D,
log10 lr*(B) = c0 + cB·(v − v̄), v = log10 B, fitted by weighted least squares through the
uncensored cells with the scatter τ of lr*(D, B)'s fit (`tuner.modeling.laws.weighted`).

It is registered only by the tests that use it (``FORM``, put into `forms.FORMS` for the test),
so they can show that a form in the registry reaches the law fit, ``moetune law fit``,
``--law`` and law.md with no other edit, and run the conformance suite on a form that is not
lr*(D, B).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuner.modeling.laws import weighted
from tuner.modeling.laws.forms import LawForm
from tuner.modeling.laws.interface import FORM_KEY, LawChecks
from tuner.modeling.laws.lr_batch_law import Cell, LawFitError, cells_aicc

KEY = "test-flat-in-d"  # apart from any shipped form's key, so it never stands in for one
MIN_CELLS = 4  # 2 coefficients, τ and a degree of freedom


@dataclass(frozen=True, kw_only=True)
class FlatInDLaw:
    """lr*(B) with no D term (module docstring)."""

    c0: float
    cb: float
    v_mean: float
    cov: tuple[tuple[float, float], tuple[float, float]]
    tau: float
    dof: int
    tokens_range: tuple[float, float]
    batch_range: tuple[float, float]
    n_cells: int

    @property
    def name(self) -> str:
        return "lr*(B), flat in D"

    @property
    def params_range(self) -> tuple[float, float] | None:
        return None

    def at(self, tokens: float, batch: float, params: float | None = None) -> float:
        return float(10 ** (self.c0 + self.cb * (math.log10(batch) - self.v_mean)))

    def band(self, tokens: float, batch: float, params: float | None = None,
             level: float = 0.95) -> tuple[float, float]:
        from scipy.stats import t as student

        x = np.array([1.0, math.log10(batch) - self.v_mean])
        sd = math.sqrt(float(x @ np.array(self.cov) @ x) + self.tau ** 2)
        half = float(student.ppf(0.5 + level / 2, max(self.dof, 1))) * sd
        mid = math.log10(self.at(tokens, batch))
        return float(10 ** (mid - half)), float(10 ** (mid + half))

    def decades_past(self, tokens: float, batch: float) -> Mapping[str, float]:
        return {"tokens": _past(tokens, self.tokens_range),
                "batch": _past(batch, self.batch_range)}

    def interaction(self, tokens: float, batch: float) -> dict[str, Any] | None:
        return None  # no D x B term

    def checks(self) -> LawChecks:
        return LawChecks(origin="study")

    def tokens_exponent(self, batch: float) -> float:
        return 0.0

    def describe(self) -> str:
        return f"= 10^({self.c0:.3f} {self.cb:+.3f}·(log10 B − {self.v_mean:.3f})), flat in D"

    def notes(self) -> list[str]:
        return [f"Scatter beyond the cells' noise τ = {self.tau:.3g} decades."]

    def term_lines(self, full_run: tuple[float, float] | None) -> list[str]:
        return []

    def formula(self) -> str:
        return f"Modeled: lr* {self.describe()}."

    def coefficient_lines(self) -> list[str]:
        return [f"Cells fitted: {self.n_cells}; cB = {self.cb:.4f}; τ = {self.tau:.3g}.", ""]

    def fit_summary(self) -> str:
        return f"{self.n_cells} cells, flat in D, tau {self.tau:.3g} decades"

    def to_dict(self) -> dict[str, Any]:
        return {FORM_KEY: KEY, "form": self.describe(), "c0": self.c0, "cb": self.cb,
                "v_mean": self.v_mean, "cov": [list(r) for r in self.cov], "tau": self.tau,
                "dof": self.dof, "tokens_range": list(self.tokens_range),
                "batch_range": list(self.batch_range), "n_cells": self.n_cells}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FlatInDLaw:
        (a, b), (c, e) = d["cov"]
        return cls(c0=float(d["c0"]), cb=float(d["cb"]), v_mean=float(d["v_mean"]),
                   cov=((float(a), float(b)), (float(c), float(e))), tau=float(d["tau"]),
                   dof=int(d["dof"]), n_cells=int(d["n_cells"]),
                   tokens_range=(float(d["tokens_range"][0]), float(d["tokens_range"][1])),
                   batch_range=(float(d["batch_range"][0]), float(d["batch_range"][1])))


def fit_flat_in_d(cells: Sequence[Cell]) -> FlatInDLaw:
    """The law through the uncensored cells.

    Raises:
        LawFitError: fewer than `MIN_CELLS` of them, or fewer than 2 batches.
    """
    kept = [c for c in cells if not c.censored and c.lr > 0]
    if len(kept) < MIN_CELLS or len({c.batch for c in kept}) < 2:
        raise LawFitError(f"cells: a law flat in D needs at least {MIN_CELLS} cells at 2 "
                          f"batches, but got {len(kept)}")
    v = np.log10([c.batch for c in kept])
    y = np.log10([c.lr for c in kept])
    se2 = np.array([c.se for c in kept]) ** 2
    v_mean = float(v.mean())
    x = np.column_stack([np.ones_like(v), v - v_mean])
    tau2 = weighted.tau2(x, y, se2)
    beta, cov = weighted.wls(x, y, 1.0 / (se2 + tau2))
    tokens = [c.tokens for c in kept]
    return FlatInDLaw(c0=float(beta[0]), cb=float(beta[1]), v_mean=v_mean,
                      cov=((float(cov[0, 0]), float(cov[0, 1])),
                           (float(cov[1, 0]), float(cov[1, 1]))),
                      tau=math.sqrt(tau2), dof=len(kept) - 2, n_cells=len(kept),
                      tokens_range=(min(tokens), max(tokens)),
                      batch_range=(float(10 ** v.min()), float(10 ** v.max())))


def flat_aicc(law: FlatInDLaw, cells: Sequence[Cell]) -> float:
    return cells_aicc(cells, lambda c: math.log10(law.at(c.tokens, c.batch)), tau=law.tau, k=3)


def _past(x: float, span: tuple[float, float]) -> float:
    return max(0.0, math.log10(x / span[1]), math.log10(span[0] / x))


FORM = LawForm(key=KEY, fit=fit_flat_in_d, read=FlatInDLaw.from_dict, aicc=flat_aicc)
