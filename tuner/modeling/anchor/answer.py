"""The full run's LR and final batch: the one answer every export format, law.md, the terminal line
and the service's law page read.

The answer is anchored where the full run is: the prior of published practice at the run's size,
tokens and batch (`tuner.modeling.anchor.prior`), moved by what the team measured, no more.
A team's law (its `[law]` study, or a law fitted from a table of its runs) is read at the full
run through the export's own hook (`tuner.modeling.laws.lr_at_batch`), and where the two agree
(chi^2 of their difference within its 95% point) they are combined in log10 space by inverse
variance, each weighed by its own band there: a narrow law near the target dominates, a CPU law
seven decades short barely moves the prior. Where they disagree beyond their bands, both cannot
be right and an average of the two would claim a band that neither supports: the answer's value
is then the narrower of the two (a team's law measured a decade from the target outweighs what
other labs chose; a far law whose band is wider than the prior's does not move it). Its band
is the prior's own where the prior is the narrower: that band's coverage is measured, each
recipe of the table predicted without it. Where the team's law is the narrower, its band reaches
out to the prior's value: a law's band at the full run is measured nowhere, one of the two is
wrong and nothing here says which, so a band that left the prior out would miss whenever the
law is the wrong one. Read at each published recipe with Step Law's dense sweep standing in for
a team's law, the law's own band held 6 of 20 published LRs there and this band 13 of 20
(benchmarks/RESULTS.md, "Another lab's law read at the published recipes"). The answer says so
with both numbers, and what can settle it (a reference study, the team's own runs). A law that
refuses its LR at the run's batch (fitted at one batch: no measured coupling) does not move the
answer; the answer says why.

LRs are compared like with like: the prior is one LR for every parameter (standard
parametrization), so under µP the team law's base LR enters as the hidden matrices' LR
(lr / width_mult) and the answer's base LR is the combined hidden LR times width_mult.

    >>> ans = answer_lr(point, prior=shipped_prior(), law=at)      # doctest: +SKIP
    >>> ans.lr, ans.band, ans.weights                              # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.modeling.anchor.offset import Offset
from tuner.modeling.anchor.prior import LEVEL, Prior, Reading, RunPoint, fit_prior, t_quantile
from tuner.modeling.anchor.recipe_table import load_recipes
from tuner.modeling.laws.lr_at_batch import LrAtBatch

Z95 = 1.959964
# A law whose band carries only its data's noise (a power law through a study's budgets, any
# law whose `LawChecks.form_error` is false) does not carry that it may bend past them; the
# exponents published for the same quantity differ by about 0.3 (the batch: DeepSeek LLM's
# 0.327 in C against Step Law's 0.571 in D; the LR's D-exponent changes sign across batches in
# Step Law's sweep), so past its data such a law's reading gets an sd of this many decades per
# decade of extrapolation, in quadrature (a 95% exponent range of +-0.3). The law in tokens and
# batch (`tuner.modeling.laws.lr_batch_law`) carries its own.
FORM_SD_PER_DECADE = 0.15


@functools.lru_cache(maxsize=8)
def shipped_prior(team: Path | None = None, family: str = "") -> Prior:
    """The prior from the shipped recipe table, with a team's own runs (``team``) if given;
    with ``family``, placed at that family (its runs read as a team's own), where a measured
    offset against a reference shaped like it anchors (`tuner.modeling.anchor.offset`)."""
    table = load_recipes(team=team)
    if family:
        table = [dataclasses.replace(r, team=r.team or r.family == family) for r in table]
    return fit_prior(table)


@dataclass(frozen=True, kw_only=True)
class Combined:
    """Two readings in log10 space combined by inverse variance (module docstring); ``lo``
    and ``hi`` bound the 95% band in decades (asymmetric where the two disagree)."""

    mu: float
    sd: float
    weight: float  # the second reading's weight (0 or 1 where they disagree)
    chi2: float  # of their difference, one degree of freedom
    disagree: bool
    lo: float
    hi: float


def combine(mu_a: float, sd_a: float, mu_b: float, sd_b: float) -> Combined:
    """(mu_a, sd_a) the prior and (mu_b, sd_b) the team's reading, decades: combined by
    inverse variance where they agree; else the narrower's value, and the band the prior's
    own when the prior is the narrower, the team's reaching the prior's value when the team's
    is (module docstring)."""
    chi2 = (mu_a - mu_b) ** 2 / (sd_a**2 + sd_b**2)
    if chi2 > Z95**2:
        if sd_a <= sd_b:
            return Combined(mu=mu_a, sd=sd_a, weight=0.0, chi2=chi2, disagree=True,
                            lo=mu_a - Z95 * sd_a, hi=mu_a + Z95 * sd_a)
        return Combined(mu=mu_b, sd=sd_b, weight=1.0, chi2=chi2, disagree=True,
                        lo=min(mu_b - Z95 * sd_b, mu_a), hi=max(mu_b + Z95 * sd_b, mu_a))
    wa, wb = 1 / sd_a**2, 1 / sd_b**2
    mu, sd = (wa * mu_a + wb * mu_b) / (wa + wb), math.sqrt(1 / (wa + wb))
    return Combined(mu=mu, sd=sd, weight=wb / (wa + wb), chi2=chi2, disagree=False,
                    lo=mu - Z95 * sd, hi=mu + Z95 * sd)


def band_sd(band: tuple[float, float], level: float = LEVEL) -> float:
    """A 95% band's sd in decades, read as normal in log10."""
    return math.log10(band[1] / band[0]) / (2 * Z95) if level == LEVEL else \
        math.log10(band[1] / band[0]) / (2 * t_quantile(level, 10**6))


@dataclass(frozen=True, kw_only=True)
class LrAnswer:
    """The full run's LR at ``batch`` (tokens per step): ``lr`` (µP: the base LR; ``hidden_lr``
    the hidden matrices'), its band (of ``lr``), and where it came from."""

    lr: float
    hidden_lr: float
    band: tuple[float, float]
    level: float
    batch: float
    prior: Reading
    law: LrAtBatch | None
    law_weight: float
    law_used: bool
    disagree: str
    width_mult: float
    prior_summary: str
    notes: list[str] = field(default_factory=list)
    offset: Offset | None = None

    @property
    def width(self) -> float:
        return self.band[1] / self.band[0]

    def rule(self) -> str:
        """The answer in one sentence: the prior (form, recipes, scatter), the law's weight."""
        p = self.prior
        said = (f"anchored answer at {self.batch:,.0f} tokens per step: the published recipes' "
                f"prior ({p.form}: {p.what}; {p.rows} AdamW recipes, left-out scatter "
                f"{p.scatter:.3f} decades) gives {p.value:.3g} [{p.band[0]:.3g}, "
                f"{p.band[1]:.3g}]")
        if p.team_offset:
            said += f", moved {p.team_offset:+.2f} decades by the team's own runs"
        if self.offset is not None and self.offset.applied:
            said += (f", moved {self.offset.decades:+.3f} decades by the team's measured offset "
                     "against the reference configuration")
        if self.law is not None and self.law_used:
            assert self.law.lr is not None
            m = self.width_mult
            lo, hi = self.law.band
            said += (f"; {law_name(self.law)} gives {self.law.lr / m:.3g} [{lo / m:.3g}, "
                     f"{hi / m:.3g}]{' (hidden matrices)' if m != 1 else ''}, "
                     f"{self.law.decades_tokens:.1f} decades past its data in D and "
                     f"{self.law.decades_batch:.1f} in B, weight {self.law_weight:.0%}")
        lo, hi = (v / self.width_mult for v in self.band)
        combined = self.law_used and not self.disagree
        said += (f"; {'combined' if combined else 'answer'} {self.hidden_lr:.4g}, band "
                 f"[{lo:.3g}, {hi:.3g}] ({self.level:.0%}, {self.width:.2f}x)")
        return " ".join(filter(None, [said + ".", self.disagree, *self.notes]))

    def to_dict(self) -> dict[str, Any]:
        return {"lr": self.lr, "hidden_lr": self.hidden_lr, "band": list(self.band),
                "level": self.level, "width": self.width, "batch_tokens": self.batch,
                "prior": self.prior.to_dict(), "law_weight": self.law_weight,
                "law_used": self.law_used, "law_lr": self.law.lr if self.law else None,
                "law_band": list(self.law.band) if self.law and self.law_used else None,
                "disagree": self.disagree, "width_mult": self.width_mult,
                "prior_forms": self.prior_summary, "notes": list(self.notes),
                "offset": self.offset.to_dict() if self.offset else None}


def law_name(at: LrAtBatch) -> str:
    return f"the team's law ({at.law})"


def answer_lr(point: RunPoint, *, prior: Prior, law: LrAtBatch | None = None,
              width_mult: float = 1.0, offset: Offset | None = None) -> LrAnswer:
    """The full run's LR at ``point`` (module docstring); ``law``: the team's law read there
    (its base LR under µP, ``width_mult`` = the target's dim / the µP base width); ``offset``:
    the team's configuration against a reference one, measured side by side at proxy scale
    (`tuner.modeling.anchor.offset`): where it held, it moves the prior and places the team
    among the table's labs (the between-lab scatter replaced by the offset's own sd)."""
    applied = offset is not None and offset.applied
    p = prior.read_lr(point, placed=applied)
    mu, sd = math.log10(p.value), band_sd(p.band)  # the t quantile's width carried
    weight, used, disagree, notes = 0.0, False, "", []
    if offset is not None:
        notes.append(f"Offset: {offset.said()}.")
        if applied:
            mu, sd = mu + offset.decades, math.hypot(sd, offset.sd)
            p = dataclasses.replace(p, value=10**mu, band=(10 ** (mu - Z95 * sd),
                                                           10 ** (mu + Z95 * sd)), sd=sd)
    if law is not None and law.lr is not None:
        law_mu, law_sd = math.log10(law.lr / width_mult), band_sd(law.band)
        if not law.form_error:  # its band carries no bend past its data
            law_sd = math.hypot(law_sd, FORM_SD_PER_DECADE * law.decades_tokens)
        c = combine(mu, sd, law_mu, max(law_sd, 1e-6))
        mu, weight, used, lo, hi = c.mu, c.weight, True, c.lo, c.hi
        if c.disagree:
            band = ("its band reaches the prior's value, since one of the two is wrong and "
                    "nothing measured here says which" if c.weight else
                    "with its own band (its coverage measured over the recipe table)")
            disagree = (f"THE TEAM'S LAW AND THE PRIOR DISAGREE beyond their bands: "
                        f"{law_name(law)} {law.lr / width_mult:.3g} against the prior's "
                        f"{p.value:.3g} ({10 ** abs(law_mu - math.log10(p.value)):.2g}x apart, "
                        f"chi^2 {c.chi2:.1f}): the answer is the narrower, "
                        f"{law_name(law) if c.weight else 'the prior'}, {band}. A reference "
                        "study beside the team's law (--reference) or the team's own past full "
                        "runs (--recipes) place the team among the labs and can settle it.")
    else:
        lo, hi = mu - Z95 * sd, mu + Z95 * sd
        if law is not None:
            notes.append(f"{law_name(law)} does not move it: {law.refusal.rstrip('.')}.")
    hidden = 10**mu
    return LrAnswer(lr=hidden * width_mult, hidden_lr=hidden,
                    band=(10**lo * width_mult, 10**hi * width_mult),
                    level=LEVEL, batch=point.batch, prior=p, law=law, law_weight=weight,
                    law_used=used, disagree=disagree, width_mult=width_mult,
                    prior_summary=prior.summary(), notes=notes, offset=offset)


@dataclass(frozen=True, kw_only=True)
class BatchAnswer:
    """The full run's final batch in tokens per step, its band and its rule."""

    tokens: float
    band: tuple[float, float]
    rule: str
    law_weight: float


def answer_batch(point: RunPoint, *, prior: Prior, law_batch: float | None = None,
                 law_band: tuple[float, float] | None = None, law: str = "",
                 decades_past: float = 0.0) -> BatchAnswer:
    """The final batch: the prior's batch law at the run, combined with the team's batch law
    (``law_batch``, its 95% band, ``decades_past`` its budgets: `FORM_SD_PER_DECADE`) when it
    has one."""
    p = prior.read_batch(point)
    said = (f"the published recipes' prior ({p.form}: {p.what}; left-out scatter "
            f"{p.scatter:.2f} decades) gives {p.value:.4g} tokens [{p.band[0]:.3g}, "
            f"{p.band[1]:.3g}]")
    if law_batch is None or law_band is None:
        return BatchAnswer(tokens=p.value, band=p.band, rule=said, law_weight=0.0)
    law_sd = math.hypot(band_sd(law_band), FORM_SD_PER_DECADE * decades_past)
    c = combine(math.log10(p.value), band_sd(p.band), math.log10(law_batch), max(law_sd, 1e-6))
    said += (f"; {law} gives {law_batch:.4g} [{law_band[0]:.3g}, {law_band[1]:.3g}] "
             f"{decades_past:.1f} decades past its budgets (its sd widened by "
             f"{FORM_SD_PER_DECADE:g} decades per decade for a law that may bend), weight "
             f"{c.weight:.0%}; {'answer' if c.disagree else 'combined'} {10 ** c.mu:.4g} tokens")
    if c.disagree:
        said += (f" (THE TWO DISAGREE beyond their bands, chi^2 {c.chi2:.1f}: the narrower's "
                 "value; the team's band reaching the prior's value where it is the team's)")
    return BatchAnswer(tokens=10**c.mu, band=(10**c.lo, 10**c.hi),
                       rule=said, law_weight=c.weight)


def target_point(*, n_active: float, n_total: float, layers: int, dim: int, seq_len: int,
                 tokens: float, batch: float) -> RunPoint:
    """A `RunPoint` for a target (non-embedding parameter counts)."""
    return RunPoint(n_active=n_active, n_total=n_total, layers=layers, dim=dim,
                    seq_len=seq_len, tokens=tokens, batch=batch)
