"""Run-to-run noise of val_loss, measured at the end of a study, and the tie rule that uses it.

With ``[study] noise_repeats = R`` (0, the default, measures nothing), once a study counts its
``n_trials`` the driver trains the ``noise_top`` feasible trials of lowest val_loss again, each
with R other seeds (the study's seed + 1 … + R), and stores the pooled standard deviation of
val_loss over those groups as the study attribute `records.NOISE`::

    {"sd": 0.012, "n": 6, "how": "2 recipe(s) x 3 seeds, pooled sd", "trials": [3, 7],
     "runs": [{"trial": 3, "seed": 1, "val_loss": 2.871}, ...]}

``n`` counts the runs behind ``sd``, the trials' own included. A run that diverges or raises is
kept in ``runs`` (val_loss "nan"/"inf", and ``error`` for an exception) and left out of ``sd``.

The re-trainings themselves (Ray tasks or this process, one `Training` each) are
`tuner.study.run.noise_retrain`; they are not Optuna trials, so they never count toward
``n_trials``, are never seen by the sampler and appear in no ranking. A resumed study
measures again only when its top trials changed.

`tied` is the rule reports use: a difference in val_loss no larger than the measured sd is a tie.
The knee (`tuner.study.results.ranking.study_knee`) is tied with the other feasible trials that
are within the noise of it on every objective whose noise is known (`knee_ties`: val_loss has a
measured noise, a modeled objective none — only an equal value ties; a timed one the spread of its
timings, `timed_noise`; the others are not judged). A trial off the front is a candidate too: one
the knee dominates by less than the noise (the same modeled cost, a val_loss above the knee's by
less than the sd) is as good as the knee for all the data can say. The pick stays the knee: a
tie says the data cannot order those trials, not which to take. `combined_noise` pools two
studies' measurements for `moetune compare`.

    >>> pooled_sd([[2.0, 2.02, 1.98], [3.0, 3.02, 2.98]])
    0.02
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainers.result import to_float
from tuner.study.results.ranking import knee, pareto_front
from tuner.study.results.trial_record import Objective, TrialRecord
from tuner.study.specs.metrics import TIMED, is_modeled
from tuner.study.store import records

Log = Callable[[str], None]
NOISY_METRIC = "val_loss"  # the one metric whose run-to-run noise a study measures
HOW_TO_MEASURE = ("set `noise_repeats = 2` in [study] to re-train the top trials with other "
                  "seeds at the end of the study")


def pooled_sd(groups: Sequence[Sequence[float]]) -> float:
    """Pooled standard deviation of ``groups`` (each: val_loss of one recipe over seeds):
    sqrt(Σ_g Σ_i (x_gi − mean_g)² / Σ_g (n_g − 1)). Non-finite values are left out; NaN when
    no group keeps two values."""
    squares, dof = 0.0, 0
    for group in groups:
        xs = [x for x in group if math.isfinite(x)]
        if len(xs) < 2:
            continue
        mean = sum(xs) / len(xs)
        squares += sum((x - mean) ** 2 for x in xs)
        dof += len(xs) - 1
    return round(math.sqrt(squares / dof), 12) if dof else math.nan


def noise_sd(study_user_attrs: Mapping[str, Any]) -> float | None:
    """The measured sd of val_loss stored on a study, None when it was not measured."""
    noise = study_user_attrs.get(records.NOISE) or {}
    sd = noise.get("sd")
    return float(sd) if isinstance(sd, int | float) and math.isfinite(sd) else None


def tied(a: float, b: float, sd: float | None) -> bool:
    """Whether val_loss ``a`` and ``b`` are tied: their difference is within the noise ``sd``
    (never, when the noise was not measured)."""
    # (1 + 1e-9): a difference of exactly sd stays a tie after float rounding (2.0 - 1.98)
    return (sd is not None and math.isfinite(a) and math.isfinite(b)
            and abs(a - b) <= sd * (1 + 1e-9))


def objective_noise(sd: float | None, objectives: Sequence[Objective]) -> dict[str, float]:
    """The noise known per objective: the measured val_loss ``sd`` for an objective named
    val_loss, 0 for a modeled one (a function of the recipe: the same recipe gives the same
    value, so only equal values tie), no entry for any other objective (never measured). Empty
    when val_loss noise was not measured: without it no tie can be judged."""
    if sd is None:
        return {}
    return {o.name: (sd if o.name == NOISY_METRIC else 0.0) for o in objectives
            if o.name == NOISY_METRIC or is_modeled(o.name)}


def timed_noise(recs: Sequence[TrialRecord], objectives: Sequence[Objective]) -> dict[str, float]:
    """For a timed objective its measured noise, as a share of the value: half the median
    relative range ((max - min) / median of a probe's repeats) of the timings behind the
    feasible ``recs`` — a bound on how far a median of the repeats moves (it held the
    largest difference of two studies timing one signature: benchmarks/RESULTS.md, "Timed
    cost"); no entry without a timing."""
    out: dict[str, float] = {}
    for o in objectives:
        if o.name not in TIMED:
            continue
        spreads = [float(r.timing["spread"]) for r in recs
                   if r.feasible and isinstance(r.timing.get("spread"), int | float)
                   and math.isfinite(r.timing["spread"])]
        if spreads:
            out[o.name] = statistics.median(spreads) / 2
    return out


def tied_relative(a: float, b: float, share: float) -> bool:
    """Whether ``a`` and ``b`` are within ``share`` of the larger of them."""
    return (math.isfinite(a) and math.isfinite(b)
            and abs(a - b) <= share * max(abs(a), abs(b)) * (1 + 1e-9))


@dataclass(frozen=True, kw_only=True)
class KneeTies:
    """The knee (with one objective: the best trial) and the trials tied with it.

    ``noise`` holds the objectives the tie was judged on and their sd; empty when it could not
    be judged (``measured`` then says whether any noise was stored at all)."""

    knee: int
    single: bool
    tied: tuple[int, ...]
    noise: dict[str, float]
    unjudged: tuple[str, ...]  # objectives without a noise estimate
    measured: bool
    relative: dict[str, float] = field(default_factory=dict)  # timed objectives: share of value
    planned: int = 0  # the noise re-trainings per trial the spec asks for (`planned_repeats`)

    @property
    def judged(self) -> bool:
        return bool(self.noise)

    def sentence(self) -> str:
        """One sentence for the report, the recommendation and ``export --pick knee``."""
        who = f"the best trial #{self.knee}" if self.single else f"the knee #{self.knee}"
        others = "other feasible trials"
        if not self.measured and self.planned:
            return (f"Whether {others} are tied with {who} cannot be judged yet: the spec "
                    f"sets `noise_repeats = {self.planned}`, and run-to-run noise is measured "
                    "by those re-trainings, which run after the last trial and have not "
                    "finished.")
        if not self.measured:
            return (f"Whether {others} are tied with {who} cannot be judged: run-to-run noise "
                    f"was not measured ({HOW_TO_MEASURE}).")
        if not self.judged:
            return (f"Whether {others} are tied with {who} cannot be judged: noise is measured "
                    f"for {NOISY_METRIC} only, and no objective is {NOISY_METRIC}.")
        within = ", ".join([f"±{sd:.3g} on {name}" if sd else f"{name} exact: modeled"
                            for name, sd in self.noise.items()]
                           + [f"±{r:.1%} on {name} (half the median range of its timings' "
                              "repeats)" for name, r in self.relative.items()])
        rest = ""
        if self.unjudged:
            many = len(self.unjudged) > 1
            rest = (f"; {', '.join(self.unjudged)} {'have' if many else 'has'} no noise "
                    f"estimate and {'were' if many else 'was'} not judged")
        if not self.tied:
            return (f"None of the {others} is within the measured run-to-run noise ({within}) "
                    f"of {who}{rest}.")
        names = ", ".join(f"#{n}" for n in self.tied)
        return (f"Within the measured run-to-run noise ({within}), {who} is tied with {names}: "
                f"the data cannot order them; the pick stays #{self.knee} (the ranking's "
                f"deterministic rule){rest}.")


def knee_ties(recs: Sequence[TrialRecord], objectives: Sequence[Objective],
              sd: float | None, *, front: Sequence[TrialRecord] | None = None,
              planned: int = 0) -> KneeTies | None:
    """The knee of ``front`` (default: the Pareto set of the feasible ``recs``) and the trials
    tied with it (module docstring); None without a feasible trial. ``planned``: the noise
    re-trainings the spec asks for (`planned_repeats`), so an unmeasured noise reads as still
    to come rather than never asked for.

    Candidates are every feasible trial of ``recs``, on the front or not: with one objective a
    tie with the best trial; with several, a trial within the noise of the knee on every judged
    objective, whether or not the knee dominates it by that little (off the front: no worse
    than the knee on an objective without a noise estimate).
    """
    feasible = sorted((r for r in recs if r.feasible), key=lambda r: r.number)
    front = list(front) if front is not None else pareto_front(feasible, objectives)
    if not front:
        return None
    k = knee(front, objectives)
    noise = objective_noise(sd, objectives)
    single = len(objectives) == 1
    pool = feasible
    relative = timed_noise(feasible, objectives) if noise else {}
    unjudged = [o for o in objectives if o.name not in noise and o.name not in relative]
    on_front = {r.number for r in front}
    ties = tuple(r.number for r in pool if r.number != k.number and noise
                 and all(tied(r.values[o], k.values[o], s) for o, s in noise.items())
                 and all(tied_relative(r.values[o], k.values[o], share)
                         for o, share in relative.items())
                 # off the front, a trial worse than the knee where no noise says by how
                 # much is just worse
                 and (r.number in on_front or not any(_worse(r, k, o) for o in unjudged)))
    return KneeTies(knee=k.number, single=single, tied=ties, noise=noise,
                    unjudged=tuple(o.name for o in objectives
                                   if o.name not in noise and o.name not in relative),
                    measured=sd is not None, relative=relative, planned=planned)


def planned_repeats(study_user_attrs: Mapping[str, Any]) -> int:
    """The ``[study] noise_repeats`` of a study's stored spec: the re-trainings that measure its
    noise after the last trial (0 when none are asked for or no spec is stored)."""
    n = ((study_user_attrs.get(records.SPEC) or {}).get("study") or {}).get("noise_repeats", 0)
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0


def _worse(r: TrialRecord, k: TrialRecord, o: Objective) -> bool:
    a, b = r.values[o.name], k.values[o.name]
    return a > b if o.direction == "minimize" else a < b


def combined_noise(attrs: Sequence[Mapping[str, Any]]) -> tuple[float, int] | None:
    """The val_loss noise of several studies together: the sd pooled over their measurements
    (each weighted by its degrees of freedom, runs minus recipes, as `pooled_sd` does) and the
    number of runs behind it; None when none of them measured it."""
    squares, dof, runs = 0.0, 0, 0
    for a in attrs:
        sd = noise_sd(a)
        if sd is None:
            continue
        noise = a[records.NOISE]
        n = int(noise.get("n") or 0)
        k = max(n - (len(noise.get("trials") or []) or 1), 1)  # one mean per recipe
        squares += k * sd * sd
        dof += k
        runs += n
    return (round(math.sqrt(squares / dof), 12), runs) if dof else None


def top_trials(recs: Sequence[TrialRecord], k: int) -> list[TrialRecord]:
    """The ``k`` feasible, trained trials of lowest val_loss (ties by trial number)."""
    ok = [r for r in recs if r.feasible and r.trained and math.isfinite(loss_of(r))]
    return sorted(ok, key=lambda r: (loss_of(r), r.number))[:k]


def loss_of(r: TrialRecord) -> float:
    return to_float(r.metrics.get("val_loss"))
