"""The team's configuration against a reference one, measured at proxy scale: how far the team's
LR optimum sits from the optimum of a configuration shaped and set like the recipe the prior
leans on, trained side by side on the same data, budgets and batches.

The prior (`tuner.modeling.anchor.prior`) says what published labs chose at the full run; the
team's own data, tokenizer and recipe choices can move the optimum away from theirs. That
move is measured where it is cheap: both configurations searched in the same (budget, batch)
cells (two law studies on the same grid), each cell's optimum from its own quadratic
(`tuner.modeling.laws.lr_batch_law.cell_optimum`). The offset is the difference of log10 lr*
per paired cell, weighed by the cells' own errors, with the scatter between cells beyond that
error (tau) in its sd.

Applied, it moves the prior as placed at the reference's family (that family's runs read as
a team's own: `tuner.modeling.anchor.prior`), so the answer is "the reference lab's LR at the
full run, times the measured offset", with the within-lab scatter and the offset's sd.

It is applied only if it holds: fitted on every budget but the largest, it must predict each
of the largest budget's paired cells inside its 95% band (as a law's held-out budget is
checked). An offset that drifts with the budget says the two configurations do not differ by
a constant factor, and carrying it seven decades further would be carrying a trend unmeasured:
it is then reported and not applied.

    >>> off = measure_offset(team_cells, reference_cells)   # doctest: +SKIP
    >>> off.applied, off.decades, off.sd                    # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuner.modeling.laws.lr_batch_law import Cell

Z95 = 1.959964


@dataclass(frozen=True, kw_only=True)
class Offset:
    """log10(lr*_team / lr*_reference) over paired cells, its sd, and its held-out check."""

    decades: float
    sd: float
    cells: int
    tokens: tuple[float, ...]  # the budgets paired
    held_tokens: float
    held: tuple[dict[str, float], ...]  # per held cell: batch, measured, predicted, half-width
    applied: bool
    reason: str
    family: str = "deepseek"  # the recipe family the reference is shaped and set like

    def said(self) -> str:
        """The offset in one sentence."""
        verdict = ("held on the largest budget, applied" if self.applied else
                   f"NOT applied: {self.reason}")
        return (f"the team's configuration against the reference, side by side in "
                f"{self.cells} cells at {len(self.tokens)} budgets: "
                f"{10 ** self.decades:.3g}x the reference's lr* ({self.decades:+.3f} "
                f"± {self.sd:.3f} decades), {verdict}")

    def to_dict(self) -> dict[str, Any]:
        return {"decades": self.decades, "sd_decades": self.sd, "factor": 10**self.decades,
                "cells": self.cells, "tokens": list(self.tokens),
                "held_tokens": self.held_tokens, "held": list(self.held),
                "applied": self.applied, "reason": self.reason, "family": self.family}


class OffsetError(ValueError):
    """The two sets of cells cannot give an offset (what is missing is said)."""


def _pairs(team: Sequence[Cell], reference: Sequence[Cell]
           ) -> list[tuple[float, float, float, float]]:
    """(tokens, batch, log10 difference, its variance) per cell both placed an optimum in."""
    ref = {(c.tokens, c.batch): c for c in reference if not c.censored}
    out = []
    for c in team:
        r = ref.get((c.tokens, c.batch))
        if r is None or c.censored:
            continue
        out.append((c.tokens, c.batch, math.log10(c.lr / r.lr), c.se**2 + r.se**2))
    return out


def _mean(diffs: np.ndarray, var: np.ndarray) -> tuple[float, float, float]:
    """(weighted mean, its variance, tau^2): the scatter beyond the cells' own errors by the
    method of moments (DerSimonian-Laird), so a few noisy cells do not claim a tight offset."""
    w = 1 / var
    mean = float(np.sum(w * diffs) / np.sum(w))
    q = float(np.sum(w * (diffs - mean) ** 2))
    k = len(diffs)
    denom = float(np.sum(w) - np.sum(w**2) / np.sum(w))
    tau2 = max(0.0, (q - (k - 1)) / denom) if k > 1 and denom > 0 else 0.0
    w_star = 1 / (var + tau2)
    mean = float(np.sum(w_star * diffs) / np.sum(w_star))
    return mean, float(1 / np.sum(w_star)), tau2


def measure_offset(team: Sequence[Cell], reference: Sequence[Cell], *,
                   family: str = "deepseek") -> Offset:
    """The offset of ``team``'s cells against ``reference``'s (module docstring), the
    reference shaped and set like the recipes of ``family`` in the table.

    Raises:
        OffsetError: fewer than 2 budgets with a paired cell, or no paired cell below the
            largest budget.
    """
    pairs = _pairs(team, reference)
    tokens = sorted({p[0] for p in pairs})
    if len(tokens) < 2:
        raise OffsetError(f"reference: an offset needs paired cells (the same tokens and batch, "
                          f"each with an optimum) at 2 or more budgets to check it on the "
                          f"largest, but got {len(pairs)} paired cell(s) at budgets {tokens}.")
    held_at = tokens[-1]
    fit = [p for p in pairs if p[0] != held_at]
    mean, var, tau2 = _mean(np.array([p[2] for p in fit]), np.array([p[3] for p in fit]))
    held = []
    for _, b, d, v in (p for p in pairs if p[0] == held_at):
        half = Z95 * math.sqrt(var + tau2 + v)
        held.append({"batch": b, "measured": d, "predicted": mean, "half_width": half})
    missed = [h for h in held if abs(h["measured"] - h["predicted"]) > h["half_width"]]
    mean_all, var_all, tau2_all = _mean(np.array([p[2] for p in pairs]),
                                        np.array([p[3] for p in pairs]))
    reason = "" if not missed else (
        f"fitted below {held_at:.4g} tokens it predicted {mean:+.3f} decades there, but "
        + ", ".join(f"{h['measured']:+.3f} at {h['batch']:.4g} tokens per step" for h in missed)
        + " lie outside its band: the offset moves with the budget")
    return Offset(decades=mean_all, sd=math.sqrt(var_all + tau2_all), cells=len(pairs),
                  tokens=tuple(tokens), held_tokens=held_at, held=tuple(held),
                  applied=not missed, reason=reason, family=family)
