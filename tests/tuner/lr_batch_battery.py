"""Synthetic truths for the lr law in tokens and batch, and the coverage of its band.

Each draw is one law study on a known truth: 4 budgets D over 1.5 decades × 3 batches B over one
decade (the shipped grid's minimum), 11 trials per cell at lr 0.15 decades apart around a guess
off the true lr* by up to ±0.3 decades, loss = the cell's bowl + Gaussian noise of ``noise`` sd.
The law is fitted on the cells' optima (`tuner.modeling.laws.lr_batch_law`) and its 95% band
checked against the true lr* at: the held-out budget (5x above the largest fitted, each fitted
batch), the held-out batch (4x above the largest fitted, at the largest fitted budget), and two
decades past the largest fitted budget (each fitted batch and the held-out batch).

Truth families (log10 lr*, u = log10(D / 2e5), v = log10(B / 800)):

- ``loglinear``: −2.5 − 0.1·u + 0.3·v + 0.1·u·v, symmetric bowls (the form itself);
- ``asymmetric``: the same law, the bowl 3x steeper above lr* than below (divergence side);
- ``bent``: −2.5 − 0.1·u + 0.08·u² + 0.3·v (the D-exponent drifts with D);
- ``saturating``: lr* = A(D)·s^½ / (1 + s^½), s = B / B_crit(D), B_crit = 800·(D/2e5)^½: lr*
  grows as √B below the critical batch and stops growing above it (McCandlish et al. 2018).

    python -m tests.tuner.lr_batch_battery --draws 200   # the coverage table (RESULTS.md)
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from tuner.modeling.laws.lr_batch_law import (
    Cell,
    cell_from_optimum,
    cell_optimum,
    censored_bound,
    fit_lr_batch_law,
    skew_shift,
)
from tuner.modeling.laws.response_surface import SurfaceError

TOKENS = (2e4, 6.3e4, 2e5, 6.3e5)
BATCHES = (256.0, 810.0, 2560.0)
HELD_D, FAR_D, HELD_B = 5 * TOKENS[-1], 100 * TOKENS[-1], 4 * BATCHES[-1]
FAMILIES = ("loglinear", "asymmetric", "bent", "saturating")


def true_log_lr(family: str, tokens: float, batch: float) -> float:
    u, v = math.log10(tokens / 2e5), math.log10(batch / 800)
    if family == "bent":
        return -2.5 - 0.1 * u + 0.08 * u * u + 0.3 * v
    if family == "saturating":
        s = batch / (800 * (tokens / 2e5) ** 0.5)
        return -2.2 - 0.1 * u + math.log10(math.sqrt(s) / (1 + math.sqrt(s)))
    return -2.5 - 0.1 * u + 0.3 * v + 0.1 * u * v


def cell(family: str, tokens: float, batch: float, noise: float,
         rng: np.random.Generator) -> Cell | None:
    """One cell's trials on the truth, and its fitted optimum (None when none is placed)."""
    m = true_log_lr(family, tokens, batch)
    x = m + rng.uniform(-0.3, 0.3) + 0.15 * np.arange(-5, 6)
    k = 0.6 * (tokens / 2e5) ** 0.1  # loss per decade² of lr: bowls narrow as D grows
    steep = np.where(x > m, 3.0 if family == "asymmetric" else 1.0, 1.0)
    z = 3.0 + k * steep * (x - m) ** 2 + rng.normal(0.0, noise, len(x))
    try:
        opt, censored = cell_optimum(10 ** x, z, n_boot=60, seed=int(rng.integers(1 << 30)))
    except SurfaceError:
        return None
    return cell_from_optimum(opt, tokens=tokens, batch=batch, censored=censored,
                             skew=skew_shift(10 ** x, z), bound=censored_bound(10 ** x, z))


def points() -> dict[str, list[tuple[float, float]]]:
    return {"held-out D (5x)": [(HELD_D, b) for b in BATCHES],
            "held-out B (4x)": [(TOKENS[-1], HELD_B)],
            "2 decades past D": [(FAR_D, b) for b in BATCHES + (HELD_B,)]}


def coverage(family: str, noise: float, draws: int, seed: int = 0
             ) -> tuple[dict[str, float], dict[str, float]]:
    """Per point group: the share of (draw, point) where the 95% band holds the true lr*, and
    the band's median half-width as a factor (√(hi/lo))."""
    rng = np.random.default_rng(seed)
    hits: dict[str, list[bool]] = {k: [] for k in points()}
    width: dict[str, list[float]] = {k: [] for k in points()}
    for _ in range(draws):
        cells = [c for d in TOKENS for b in BATCHES
                 if (c := cell(family, d, b, noise, rng)) is not None]
        law = fit_lr_batch_law(cells)
        for group, pts in points().items():
            for d, b in pts:
                lo, hi = law.band(d, b)
                width[group].append(math.sqrt(hi / lo))
                hits[group].append(
                    math.log10(lo) <= true_log_lr(family, d, b) <= math.log10(hi))
    return ({k: float(np.mean(v)) for k, v in hits.items()},
            {k: float(np.median(v)) for k, v in width.items()})


def main() -> None:
    ap = argparse.ArgumentParser(description="coverage of the lr*(D, B) law's 95% band")
    ap.add_argument("--draws", type=int, default=200)
    args = ap.parse_args()
    groups = list(points())
    print("| truth | noise sd | " + " | ".join(f"{g}: covered (median band)" for g in groups)
          + " |")
    print("|---|---|" + "---|" * len(groups))
    for family in FAMILIES:
        for noise in (0.03, 0.07):
            cov, wid = coverage(family, noise, args.draws)
            print(f"| {family} | {noise} | "
                  + " | ".join(f"{cov[g]:.0%} (x/{wid[g]:.2f})" for g in groups)
                  + " |", flush=True)


if __name__ == "__main__":
    main()
