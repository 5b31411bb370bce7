"""The LR a law gives at the batch a full run writes, or a refusal that says why and what to run.

The optimal LR moves with the batch: in Step Law's released sweep (arXiv:2503.04715, 1,911 dense
runs, 13 batches from 32k to 4M tokens per step) a power law in D fitted at one batch and applied
at others misses lr* several-fold (benchmarks/RESULTS.md, "lr law in tokens and batch"), and the
sign of the LR's D-exponent at a fixed batch flips
across the batch range. So a law carries its LR only to a batch where it measured the coupling:

- a **two-variable law** (`tuner.modeling.laws.interface.LrLaw`: `LrBatchLaw`, a table's law)
  gives lr*(D, B) at any batch, with its band and both extrapolation distances;
- a law study whose budgets searched lr at 3 or more batches carries its two-variable law
  (``StudyLaw.lr_batch``, fitted by `tuner.study.workflows.law_fit`), which answers as above;
- a **law in D alone** (`tuner.modeling.laws.power_law.StudyLaw`) whose trials all ran at one batch
  (`LawBatches.fixed`: the shipped ``search_spaces/law.toml``, 256 tokens per step) is valid at
  that batch only: elsewhere `lr_at_batch` refuses (``lr`` None, ``refusal`` naming what to
  run), and the caller decides what to write (`tuner.modeling.full_run.build_full_run` stops
  unless the user gives an LR or accepts the LR at the fitted batch, labelled);
- a law in D alone whose study searched the batch and fitted a batch law B*(D) went through each
  budget's optimum at its own best batch: its lr* holds along that path, so at a batch inside
  the batch law's band at D (within `BATCH_TOLERANCE` for rounding) and nowhere else.

    >>> at = lr_at_batch(law, tokens=14.8e12, batch=15360 * 4096,  # doctest: +SKIP
    ...                  flops_per_token=m, batches=LawBatches.of([256.0]))
    >>> at.lr is None, at.refusal[:40]                                 # doctest: +SKIP
    (True, 'the study fitted its lr law at one batch')
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tuner.modeling.laws.interface import LrLaw
from tuner.modeling.laws.power_law import StudyLaw

BATCH_TOLERANCE = 1.05  # a batch this close (ratio) counts as the fitted one: rounding to dp
LEVEL = 0.95
WHAT_TO_RUN = ("a law study with the batch searched ([space.params.batch_end], >= 3 batches "
               "spanning >= 1 decade, lr searched at each), or `moetune law fit` on runs a team "
               "already has at several batches")


@dataclass(frozen=True, kw_only=True)
class LawBatches:
    """The batches (tokens per step) a law in D alone was fitted at: ``fixed`` when every lr
    trial ran at one, and the range its trials ran at."""

    fixed: float | None
    low: float
    high: float

    @classmethod
    def of(cls, batches: Iterable[float]) -> LawBatches:
        """From the batches of a study's trials (tokens per step).

        Raises:
            ValueError: no batch.
        """
        seen = sorted({float(b) for b in batches})
        if not seen:
            raise ValueError("batches: a law's needs at least one trial's batch, but got none.")
        return cls(fixed=seen[0] if len(seen) == 1 else None, low=seen[0], high=seen[-1])

    def decades_past(self, batch: float) -> float:
        """How far ``batch`` lies outside the batches fitted, in decades (0 inside)."""
        return max(0.0, math.log10(batch / self.high), math.log10(self.low / batch))


@dataclass(frozen=True, kw_only=True)
class LrAtBatch:
    """A law's LR at (``tokens``, ``batch``): ``lr`` None where it is refused (``refusal``
    says why and what to run); ``law_lr`` is the law's value where it was measured (at
    ``valid_at_batch`` for a law in D alone), given beside a refusal, never in its place."""

    law: str
    tokens: float
    batch: float
    lr: float | None
    law_lr: float
    band: tuple[float, float]
    level: float
    decades_tokens: float
    decades_batch: float
    valid_at_batch: float | None  # None: the law holds at any batch (two variables)
    refusal: str
    rule: str
    # a two-variable law's D x B term at (tokens, batch) (`LrBatchLaw.interaction`), if it has one
    interaction: dict[str, Any] | None = None
    form_error: bool = False  # the band carries model-form error past the law's data

    def band_dict(self) -> dict[str, Any]:
        """The band as numbers (the native export's ``lr.band``)."""
        return {"lo": self.band[0], "hi": self.band[1], "level": self.level,
                "decades_past_tokens": self.decades_tokens,
                "decades_past_batch": self.decades_batch}


def lr_at_batch(law: StudyLaw | LrLaw, *, tokens: float, batch: float,
                flops_per_token: float, params: float | None = None,
                batches: LawBatches | None = None) -> LrAtBatch:
    """The LR ``law`` gives for a run of ``tokens`` at ``batch`` tokens per step (module
    docstring); ``flops_per_token`` is the full run's M (a law in C = M·D), ``params`` its N
    (a two-variable law with an N term), ``batches`` where a law in D alone was fitted (None:
    unknown, so it carries no LR but along its batch law). A study's law that fitted lr*(D, B)
    through its (budget, batch) cells (``StudyLaw.lr_batch``) answers with that law."""
    if isinstance(law, StudyLaw) and law.lr_batch is not None:
        law = law.lr_batch
    if not isinstance(law, StudyLaw):
        name = law.name
        lo, hi = law.band(tokens, batch, params, level=LEVEL)
        past = law.decades_past(tokens, batch)
        d_tokens, d_batch = past["tokens"], past["batch"]
        lr = law.at(tokens, batch, params)
        term = law.interaction(tokens, batch)
        return LrAtBatch(law=name, tokens=tokens, batch=batch, lr=lr, law_lr=lr,
                         band=(lo, hi), level=LEVEL, decades_tokens=d_tokens,
                         decades_batch=d_batch, valid_at_batch=None, refusal="",
                         rule=(f"the law {name}" if law.checks().origin == "table" else
                               f"the study's own law ({name})") + " in tokens and batch: "
                              "lr*(D, B) "
                              f"at D = {tokens:.4g}, B = {batch:.4g} tokens per step: {lr:.4g}, "
                              f"band [{lo:.3g}, {hi:.3g}] ({LEVEL:.0%}), {d_tokens:.1f} decades "
                              f"past the fitted budgets in D and {d_batch:.1f} in B"
                              f"{_params_said(law, params)}{interaction_said(term)}",
                         interaction=term, form_error=law.checks().form_error)
    x = law.x(tokens, flops_per_token)
    lr, (lo, hi) = law.lr.at(x), law.lr.band(x, LEVEL)
    d_tokens = law.lr.decades_past(x)
    var = "D" if law.variable == "tokens" else "C"
    said = (f"the study's own law ({law.name}): lr*({var}) = {law.lr.coef:.4g}*{var}^"
            f"{law.lr.exponent:.4f} (exponent 95% [{law.lr.exponent_interval[0]:.3f}, "
            f"{law.lr.exponent_interval[1]:.3f}]) at {var} = {x:.4g}: {lr:.4g}, band "
            f"[{lo:.3g}, {hi:.3g}], {d_tokens:.1f} decades past the largest fitted budget "
            f"({law.lr.x_max:.4g})")
    valid, why = _valid_batch(law, x, batch, batches)
    d_batch = (abs(math.log10(batch / valid)) if valid else
               batches.decades_past(batch) if batches else math.nan)
    at = LrAtBatch(law=law.name, tokens=tokens, batch=batch, lr=None, law_lr=lr, band=(lo, hi),
                   level=LEVEL, decades_tokens=d_tokens, decades_batch=d_batch,
                   valid_at_batch=valid, refusal=why, rule=said)
    if why:
        return at
    return dataclasses.replace(at, lr=lr, rule=f"{said}; {_where(law, batch, valid)}")


def interaction_said(info: dict[str, Any] | None) -> str:
    """For a law with a D x B term (``info``: `LrBatchLaw.interaction` at the point asked): how
    many decades of its answer there that term gives, and whether the cells resolve it."""
    if info is None:
        return ""
    said = (f"the D x B term ({info['coef']:+.3g} ± {info['se']:.2g}, |t| = "
            f"{abs(info['t']):.1f}: {'resolved' if info['resolved'] else 'not resolved'} by "
            "the cells)")
    if info["left_out"]:
        return (f"; {said} is left out of lr*: kept, it would give "
                f"{info['decades_if_kept']:+.2f} decades here (the band carries it)")
    return f"; of which {said} gives {info['decades']:+.2f} decades"


def _params_said(law: LrLaw, params: float | None) -> str:
    """The N it was read at and how far past its fitted sizes; a law with no N term says so."""
    fitted = law.params_range
    if params is None:
        return ""
    if not fitted:
        return (f", at N = {params:.4g} non-embedding parameters, with no term in N (its cells "
                "at one model size): how lr* moves with N was not measured")
    past = max(0.0, math.log10(params / fitted[1]), math.log10(fitted[0] / params))
    return (f", at N = {params:.4g} non-embedding parameters ({past:.1f} decades past the "
            f"fitted {fitted[0]:.3g}-{fitted[1]:.3g})")


def _valid_batch(law: StudyLaw, x: float, batch: float,
                 batches: LawBatches | None) -> tuple[float | None, str]:
    """(the batch the law's LR was measured at, why ``batch`` is refused or '')."""
    if batches is not None and batches.fixed is not None:
        fixed = batches.fixed
        if max(batch / fixed, fixed / batch) <= BATCH_TOLERANCE:
            return fixed, ""
        return fixed, (f"the study fitted its lr law at one batch, {fixed:.4g} tokens per step, "
                       f"and never varied it: how lr* moves with the batch was not measured, so "
                       f"its LR does not carry to the full run's {batch:.4g} tokens per step "
                       f"({abs(math.log10(batch / fixed)):.1f} decades away). To export an LR "
                       f"at that batch, run {WHAT_TO_RUN}")
    if law.batch is not None:
        b_star = law.batch.at(x)
        lo, hi = law.batch.band(x, LEVEL)
        if lo / BATCH_TOLERANCE <= batch <= hi * BATCH_TOLERANCE:
            return b_star, ""
        return b_star, (f"the study's lr law follows each budget's own best batch, B*({x:.4g}) = "
                        f"{b_star:.4g} tokens per step (band [{lo:.3g}, {hi:.3g}]); "
                        f"{batch:.4g} lies outside it, where the law says nothing about lr*. "
                        f"Export at the batch law's batch (leave --global-batch out), or run "
                        f"{WHAT_TO_RUN}")
    return None, (f"the study's lr law does not say which batch its optima were measured at "
                  f"(the batch was searched, and no batch law was placed), so its LR carries to "
                  f"no batch. Run {WHAT_TO_RUN}")


def _where(law: StudyLaw, batch: float, valid: float | None) -> str:
    if law.batch is not None and valid is not None and valid != batch:
        return (f"for a batch of {batch:.4g} tokens per step, inside the band of the study's "
                f"batch law B* = {valid:.4g}, along which the lr law was fitted")
    return f"at the batch it was fitted at, {batch:.4g} tokens per step"
