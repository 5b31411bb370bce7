"""The fp8-vs-bf16 validation-loss gap, against DeepSeek-V3's bar of 0.25% relative.

Pairs are trials whose recipes are identical except for `precision` (seed included), so the gap
is the precision's and nothing else's. When a study has no such pairs, the best fp8 and best
bf16 trials are compared instead and the result says it is unmatched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from optuna.trial import TrialState

from reports.analysis.snapshot import Snapshot
from trainers.result import to_float
from tuner.study.results.trial_record import TrialRecord

DEEPSEEK_V3_BAR = 0.0025  # fp8 loss within 0.25% (relative) of bf16


@dataclass(frozen=True, kw_only=True)
class Fp8Gap:
    """(fp8 − bf16) / bf16 of val_loss for one pair of trials."""

    fp8_trial: int
    bf16_trial: int
    fp8_loss: float
    bf16_loss: float
    matched: bool  # same recipe apart from precision
    fp8_emulated: bool | None

    @property
    def relative(self) -> float:
        return (self.fp8_loss - self.bf16_loss) / self.bf16_loss

    @property
    def within_bar(self) -> bool:
        return abs(self.relative) < DEEPSEEK_V3_BAR


def fp8_gaps(snapshot: Snapshot) -> list[Fp8Gap]:
    """Matched fp8/bf16 pairs; else one unmatched best-vs-best pair; else nothing."""
    runs = {p: _finished(snapshot, p) for p in ("fp8", "bf16")}
    if not runs["fp8"] or not runs["bf16"]:
        return []
    by_key = {_key(r): r for r in runs["bf16"]}
    gaps = [_gap(f, by_key[_key(f)], matched=True) for f in runs["fp8"] if _key(f) in by_key]
    if gaps:
        return gaps
    best = {p: min(rs, key=_loss) for p, rs in runs.items()}
    return [_gap(best["fp8"], best["bf16"], matched=False)]


def _finished(snapshot: Snapshot, precision: str) -> list[TrialRecord]:
    # COMPLETE only: pruned runs saw fewer tokens; warm-start ones were another study's
    return [r for r in snapshot.records
            if r.state == TrialState.COMPLETE and r.recipe_dict.get("precision") == precision
            and not r.warm_start
            and math.isfinite(_loss(r))]


def _loss(r: TrialRecord) -> float:
    return to_float(r.metrics.get("val_loss"))


def _key(r: TrialRecord) -> tuple:
    recipe = dict(r.recipe_dict)
    recipe.pop("precision", None)
    return tuple(sorted((k, repr(v)) for k, v in recipe.items()))


def _gap(fp8: TrialRecord, bf16: TrialRecord, *, matched: bool) -> Fp8Gap:
    return Fp8Gap(fp8_trial=fp8.number, bf16_trial=bf16.number, fp8_loss=_loss(fp8),
                  bf16_loss=_loss(bf16), matched=matched,
                  fp8_emulated=fp8.metrics.get("fp8_emulated"))
