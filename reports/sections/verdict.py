"""Which of two studies did better, asked fairly: at equal budgets, and no winner inside the noise.

Equal budgets: both studies must train the same tokens per trial (``[budget] tokens_per_trial``;
`equal_budgets` refuses otherwise), and they are compared on the same number of finished trials
(those counted toward ``n_trials``, `tuner.study.run.resume.counts_toward_target`): the larger is
cut to its first N finished trials (by trial number), N the smaller's count, and the comparison
says so. A hypervolume only grows with trials and a best value only improves, so a study that
ran longer would otherwise win by spending more.

The verdict (`judge`): with one objective, the best values; with several, the hypervolumes under
one reference point. With the run-to-run noise both studies measured (`tuner.study.results.noise`,
pooled by `combined_noise`), two best values within the noise are "cannot tell apart"
(`tuner.study.results.noise.tied`, the rule the ranked table uses). For hypervolumes the same rule
is applied to the front: the apparent winner wins only if its hypervolume stays above the other's
with every point of its front made worse by the noise on each objective whose noise is known (with
one objective this is exactly ``tied``). Without a noise estimate for any objective the verdict is
"cannot judge", never a winner.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from reports.analysis.frame import records_frame
from reports.analysis.hypervolume import hypervolume
from reports.analysis.snapshot import Snapshot
from tuner.study.results.noise import (
    HOW_TO_MEASURE,
    NOISY_METRIC,
    combined_noise,
    objective_noise,
    tied,
    timed_noise,
)
from tuner.study.results.ranking import to_minimization
from tuner.study.run.resume import counts_toward_target
from tuner.study.store import records


def tokens_per_trial(snap: Snapshot) -> int | None:
    """The study's ``[budget] tokens_per_trial`` as stored with its spec; None when unknown."""
    spec = snap.study_user_attrs.get(records.SPEC) or {}
    tokens = (spec.get("budget") or {}).get("tokens_per_trial")
    return int(tokens) if isinstance(tokens, int | float) else None


def equal_budgets(snaps: list[Snapshot]) -> tuple[list[Snapshot], list[str]]:
    """Both snapshots on equal budgets: their finished trials only, the larger cut to the
    smaller's count; and the sentences that say what was done.

    Raises:
        ValueError: the studies train different tokens per trial (nothing comparable).
    """
    names = [s.study_name for s in snaps]
    tokens = [tokens_per_trial(s) for s in snaps]
    lines = []
    if None not in tokens and tokens[0] != tokens[1]:
        raise ValueError(f"compare: studies are compared only at equal budgets, but "
                         f"[budget] tokens_per_trial differs: {names[0]}={tokens[0]}, "
                         f"{names[1]}={tokens[1]}; compare studies trained with the same "
                         "tokens per trial.")
    if None in tokens:
        unknown = " and ".join(n for n, t in zip(names, tokens, strict=True) if t is None)
        lines.append(f"Tokens per trial not recorded for {unknown}: equal budgets per trial "
                     "not checked.")
    else:
        lines.append(f"Both studies trained {tokens[0]} tokens per trial.")
    # the trials that spent the budget: interrupted ones (re-run) and warm-start ones (another
    # study's) do not count, as toward n_trials
    finished = [[t.number for t in s.trials if counts_toward_target(t)] for s in snaps]
    n = min(len(f) for f in finished)
    out = []
    for k, (s, done) in enumerate(zip(snaps, finished, strict=True)):
        keep = sorted(done)[:n]
        if len(done) > n:
            cut = (f"only {s.study_name}'s first finished trial (#{keep[0]}) is compared."
                   if n == 1 else f"only {s.study_name}'s first {n} finished trials "
                   f"(#{keep[0]}–#{keep[-1]}) are compared." if n else
                   f"none of {s.study_name}'s trials is compared.")
            lines.append(f"{s.study_name} finished {len(done)} trials and {names[1 - k]} {n}: "
                         + cut)
        out.append(_only(s, set(keep)))
    lines.append(f"Compared at equal budgets: {n} finished trial{'s' if n != 1 else ''} "
                 "per study.")
    return out, lines


def _only(s: Snapshot, numbers: set[int]) -> Snapshot:
    """``s`` restricted to the trials ``numbers`` (ranks and the knee recomputed on them)."""
    recs = [r for r in s.records if r.number in numbers]
    return dataclasses.replace(
        s, trials=[t for t in s.trials if t.number in numbers], records=recs,
        frame=records_frame(recs, s.objectives, noise=s.noise_sd))


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """``winner``: a study name, or None when the comparison cannot tell (or cannot judge)."""

    winner: str | None
    text: str  # the verdict in one paragraph
    noise: str  # the noise used, and n


def judge(snaps: list[Snapshot], points: Sequence[np.ndarray], hvs: Sequence[float],
          reference_min: Sequence[float]) -> Verdict:
    """The verdict (module docstring). ``points``: each study's feasible objective values in
    their own orientation; ``hvs`` their hypervolumes under ``reference_min`` (minimisation)."""
    objectives = snaps[0].objectives
    directions = [o.direction for o in objectives]
    names = [s.study_name for s in snaps]
    pooled = combined_noise([s.study_user_attrs for s in snaps])
    noise = objective_noise(pooled[0] if pooled else None, objectives)
    said = _noise_line(snaps, pooled)
    empty = [len(p) == 0 for p in points]
    if any(empty):
        if all(empty):
            return Verdict(winner=None, text="Neither study has a feasible trial: nothing to "
                           "compare.", noise=said)
        w = names[empty.index(False)]
        return Verdict(winner=w, text=f"**{w}** is better: only it has feasible trials.",
                       noise=said)
    why_not = (f"run-to-run noise was not measured in either study ({HOW_TO_MEASURE})"
               if pooled is None else
               f"the noise is measured for {NOISY_METRIC} only, and no objective is "
               f"{NOISY_METRIC}")
    if len(objectives) == 1:
        return _judge_best(names, points, directions[0], objectives[0].name, noise, why_not,
                           said)
    return _judge_hypervolume(names, points, hvs, reference_min, directions,
                              [o.name for o in objectives], noise, why_not, said,
                              relative=timed_noise([r for s in snaps for r in s.records],
                                                   objectives))


def _judge_best(names: list[str], points: Sequence[np.ndarray], direction: str, name: str,
                noise: dict[str, float], why_not: str, said: str) -> Verdict:
    best = [float(p[:, 0].max() if direction == "maximize" else p[:, 0].min()) for p in points]
    shown = (f"best {name}: {names[0]} {best[0]:.6g}, {names[1]} {best[1]:.6g} (difference "
             f"{abs(best[0] - best[1]):.3g})")
    if name not in noise:
        return Verdict(winner=None, text=f"**Cannot judge**: {shown}; {why_not}.", noise=said)
    sd = noise[name]
    if tied(best[0], best[1], sd):
        return Verdict(winner=None, text=f"**Cannot tell apart**: {shown}, inside the measured "
                       f"run-to-run noise (±{sd:.3g}).", noise=said)
    k = int(np.argmax(best) if direction == "maximize" else np.argmin(best))
    return Verdict(winner=names[k], text=f"**{names[k]}** is better: {shown}, larger than the "
                   f"measured run-to-run noise (±{sd:.3g}).", noise=said)


def _judge_hypervolume(names: list[str], points: Sequence[np.ndarray], hvs: Sequence[float],
                       reference_min: Sequence[float], directions: list[str],
                       objectives: list[str], noise: dict[str, float], why_not: str,
                       said: str, relative: dict[str, float] | None = None) -> Verdict:
    shown = f"hypervolume {names[0]} {hvs[0]:.6g}, {names[1]} {hvs[1]:.6g}"
    if not noise:
        return Verdict(winner=None, text=f"**Cannot judge**: {shown}; {why_not}.", noise=said)
    relative = relative or {}
    exact = [o for o in objectives if o not in noise and o not in relative]
    within = ", ".join([f"±{sd:.3g} on {o}" if sd else f"{o} exact: modeled"
                        for o, sd in noise.items()]
                       + [f"±{r:.1%} on {o} (half the median range of its timings' repeats)"
                          for o, r in relative.items()]) + (
        f"; {', '.join(exact)}: no noise estimate, taken as exact" if exact else "")
    if hvs[0] == hvs[1]:
        return Verdict(winner=None, text=f"**Cannot tell apart**: {shown}: equal.", noise=said)
    w = int(np.argmax(hvs))
    worse = to_minimization(points[w], directions)
    for k, o in enumerate(objectives):  # every point of the winner's front made worse
        worse[:, k] += noise.get(o, 0.0) + relative.get(o, 0.0) * np.abs(worse[:, k])
    hv_worse = hypervolume(worse, reference_min)
    if hv_worse > hvs[1 - w]:
        return Verdict(winner=names[w], text=f"**{names[w]}** is better: {shown}; with every "
                       f"point of its front made worse by the noise ({within}) its "
                       f"hypervolume is {hv_worse:.6g}, still above {names[1 - w]}'s.",
                       noise=said)
    return Verdict(winner=None, text=f"**Cannot tell apart**: {shown}; with every point of "
                   f"{names[w]}'s front made worse by the measured noise ({within}) its "
                   f"hypervolume is {hv_worse:.6g}, not above {names[1 - w]}'s: the difference "
                   "is inside the noise.", noise=said)


def _noise_line(snaps: list[Snapshot], pooled: tuple[float, int] | None) -> str:
    """The noise used and n, per study and pooled."""
    parts = []
    for s in snaps:
        noise = s.study_user_attrs.get(records.NOISE) or {}
        sd = s.noise_sd
        parts.append(f"{s.study_name}: ±{sd:.3g} from n = {noise.get('n', '?')} runs "
                     f"({noise.get('how', 'measured')})" if sd is not None
                     else f"{s.study_name}: not measured")
    if pooled is None:
        return f"Noise used: none ({'; '.join(parts)})."
    alone = [s.study_name for s in snaps if s.noise_sd is None]
    assumed = (f" The noise measured in the other study is assumed to hold for "
               f"{alone[0]}, compared at the same budget." if len(alone) == 1 else "")
    return (f"Noise used: {NOISY_METRIC} sd ±{pooled[0]:.3g}, pooled over n = {pooled[1]} runs "
            f"({'; '.join(parts)}).{assumed}")
