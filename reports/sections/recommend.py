"""What to run: the study's recommended recipe in words, the alternatives on the Pareto front and
what each trades, how sure the study can be, what to check, and the command that exports it.

The recommendation is the knee of the front (the best balance of the objectives; with one
objective, the best trial): the trial `moetune export --pick knee` takes. It names the trials tied
with it within the measured noise (`tuner.study.results.noise.knee_ties`), or says that ties cannot
be judged without a noise measurement. It opens ranked.md and report.html, and `moetune submit`
prints it when the study ends.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from reports.analysis.snapshot import Snapshot
from tuner.study.results.diagnostics import edge_warnings, unvaried_warnings
from tuner.study.results.noise import planned_repeats
from tuner.study.results.ranking import pareto_front, study_knee
from tuner.study.results.trial_record import TrialRecord
from tuner.study.specs.metrics import LOAD_DEPENDENT, load_warning
from tuner.study.store import records

MAX_ALTERNATIVES = 4
# a rise in the recommended trial's val_loss curve worth a remark, without a measured noise:
# this share of the loss (with one, the noise sd: a rise inside it may be the evaluation's)
RISE_SHARE = 0.02


@dataclass(frozen=True, kw_only=True)
class Recommendation:
    trial: int
    single: bool  # one objective: the best trial; several: the knee of the front
    recipe: str  # the searched knobs, in words
    values: dict[str, float]
    alternatives: list[str] = field(default_factory=list)  # "#7: ... trades ..."
    tied: tuple[int, ...] = ()  # trials tied with it within the measured noise
    ties: str = ""  # one sentence: who is tied with it, or why that cannot be judged
    confidence: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    command: str = ""


def recommend(snapshot: Snapshot) -> Recommendation | None:
    """The recommendation of a snapshot (None without a feasible trial)."""
    recs = snapshot.records
    objectives = snapshot.objectives
    knee = study_knee(recs, objectives)
    ties = snapshot.knee_ties()
    if knee is None or ties is None:
        return None
    feasible = [r for r in recs if r.feasible]
    front = pareto_front(feasible, objectives)
    finished = [r for r in recs if r.trained and not r.warm_start]
    warnings = edge_warnings(snapshot.trials, knee.number, finished)
    warnings += unvaried_warnings(feasible)
    warnings += _worst_max_vio(knee, feasible)
    warnings += _curve_rise(knee, snapshot.noise_sd)
    warnings += [load_warning(o.name, "objective") for o in objectives
                 if o.name in LOAD_DEPENDENT]
    return Recommendation(
        trial=knee.number, single=len(objectives) == 1, recipe=_recipe_words(knee),
        values=dict(knee.values),
        alternatives=[_trade(r, knee, snapshot) for r in front if r.number != knee.number]
        [:MAX_ALTERNATIVES], tied=ties.tied,
        ties=" ".join(filter(None, [ties.sentence(), _undetermined(knee, ties.tied, recs)])),
        confidence=_confidence(snapshot, feasible, front),
        warnings=warnings, command=_command(snapshot, single=len(objectives) == 1))


def _curve_rise(r: TrialRecord, sd: float | None) -> list[str]:
    """A remark when ``r``'s val_loss curve rose, before its end, above its lowest value so far
    by more than the noise (``sd``; unmeasured: `RISE_SHARE` of the loss): the final value
    hides an unsteady stretch (a loss spike, an LR too high for a while)."""
    points = [(t, v) for t, v in r.eval_curve if math.isfinite(v)]
    low = 0  # index of the lowest point so far
    rise = (0.0, 0, 0)  # (how much, from index, to index): the largest rise above a low
    for i in range(1, len(points)):
        if points[i][1] - points[low][1] > rise[0]:
            rise = (points[i][1] - points[low][1], low, i)
        if points[i][1] < points[low][1]:
            low = i
    size, a, b = rise
    if not size or size <= (sd if sd else RISE_SHARE * points[a][1]):
        return []
    (t0, v0), (t1, v1), end = points[a], points[b], points[-1][1]
    how = f"the measured noise ±{sd:.3g}" if sd else f"{RISE_SHARE:.0%} of the loss"
    after = f" before falling to {end:.3f}" if end < v1 else ""
    return [f"#{r.number}'s val_loss rose from {v0:.3f} at {t0:,} tokens to {v1:.3f} at "
            f"{t1:,}{after}: a rise beyond {how} that its final value does not show (an "
            "unsteady stretch: an LR or warmup at its limit, a loss spike); see curves.png."]


def _undetermined(knee: TrialRecord, tied: tuple[int, ...], recs: list[TrialRecord]) -> str:
    """The knobs the data leave open: those in which a trial tied with the knee differs from it
    (a float by more than 20% of the larger value, anything else by being another value)."""
    by_number = {r.number: r for r in recs}
    open_: dict[str, list[str]] = {}
    for n in tied:
        for name, value in sorted(by_number[n].params.items()):
            if _differs(value, knee.params.get(name)):
                open_.setdefault(name, []).append(f"#{n} {_word(value)}")
    if not open_:
        return ""
    parts = [f"{name} (the knee {_word(knee.params.get(name))}; {', '.join(at)})"
             for name, at in open_.items()]
    return (f"So the data do not determine {'; '.join(parts)}: a tied trial reaches the same "
            "result with another value.")


def _differs(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, int | float) and not isinstance(b, bool):
        return abs(a - b) > 0.2 * max(abs(a), abs(b))
    return a != b


def _word(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _worst_max_vio(knee: TrialRecord, feasible: list[TrialRecord]) -> list[str]:
    """A warning when the knee's expert load is the least balanced of the feasible trials
    (its per-batch MaxVio the highest of three or more)."""
    vio = {r.number: r.metric("max_vio_batch") for r in feasible}
    vio = {n: v for n, v in vio.items() if math.isfinite(v)}
    others = [v for n, v in vio.items() if n != knee.number]
    if len(others) < 2 or knee.number not in vio or vio[knee.number] <= max(others):
        return []
    median = statistics.median(others)
    return [f"#{knee.number} has the highest MaxVio (per batch) of the {len(vio)} feasible "
            f"trials: {vio[knee.number]:.3g} (median of the others {median:.3g}): its experts' "
            "load is the least balanced; read bias_update_speed and the MaxVio plot before "
            "carrying it to the full run."]


def _recipe_words(r: TrialRecord) -> str:
    parts = []
    for name, value in sorted(r.params.items()):
        parts.append(f"{name} {value:.3g}" if isinstance(value, float) else f"{name} {value}")
    return ", ".join(parts) or "the spec's fixed recipe"


def _trade(r: TrialRecord, knee: TrialRecord, snapshot: Snapshot) -> str:
    changes = []
    for o in snapshot.objectives:
        a, b = knee.values[o.name], r.values[o.name]
        if a == b or not (math.isfinite(a) and math.isfinite(b)):
            continue
        rel = (b - a) / abs(a) if a else math.inf
        better = (b < a) == (o.direction == "minimize")
        changes.append(f"{o.name} {rel:+.1%} ({'better' if better else 'worse'})")
    return f"#{r.number} ({_recipe_words(r)}): " + (", ".join(changes) or "same values")


def _confidence(snapshot: Snapshot, feasible: list[TrialRecord],
                front: list[TrialRecord]) -> list[str]:
    n = len(snapshot.records)
    lines = [f"{len(feasible)} feasible of {n} trials; {len(front)} on the Pareto front."]
    noise = snapshot.study_user_attrs.get(records.NOISE)
    if noise:
        lines.append(f"Run-to-run noise of val_loss (measured, {noise.get('how', '')}): "
                     f"±{float(noise['sd']):.3g}; differences below that are ties.")
    elif planned := planned_repeats(snapshot.study_user_attrs):
        lines.append(f"Run-to-run noise is not measured yet: the spec's `noise_repeats = "
                     f"{planned}` re-trainings run after the last trial and have not finished; "
                     "until they have, small differences in val_loss may be noise.")
    else:
        lines.append("Run-to-run noise was not measured for this study: small differences in "
                     "val_loss may be noise (re-run the top trials with other seeds, or "
                     "`moetune rerun`, to see their spread).")
    check = snapshot.study_user_attrs.get(records.VALIDATION)
    if check:
        stays = "stays on top" if check.get("chosen_stays_on_top") else "does NOT stay on top"
        lines.append(f"Transfer (measured by `moetune validate` at {check.get('scale')}x width): "
                     f"Spearman {check.get('spearman')}; the best-loss trial {stays}.")
    else:
        lines.append(f"Transfer to a larger model not checked yet: `moetune validate "
                     f"{snapshot.study_name} --top 5 --scale 2`.")
    return lines


def _command(snapshot: Snapshot, *, single: bool) -> str:
    spec = snapshot.study_user_attrs.get(records.SPEC) or {}
    full = spec.get("full_run") or {}
    target = full.get("target") or (spec.get("model") or {}).get("full") or "deepseek-v3-671b"
    return (f"moetune export {snapshot.study_name} --pick {'best-loss' if single else 'knee'} "
            f"--target {target} --hardware {full.get('hardware', 'h800')} "
            f"--gpus {full.get('gpus', 2048)} --tokens {float(full.get('tokens', 14.8e12)):g} "
            f"--format megatron --out {snapshot.study_name}.args")


def markdown(rec: Recommendation | None) -> list[str]:
    """The recommendation as ranked.md's first section."""
    if rec is None:
        return ["## Recommendation", "", "No feasible trial yet: nothing to recommend."]
    values = ", ".join(f"{k} = {v:.4g}" for k, v in rec.values.items())
    why = ("It is the best trial, the one `--pick best-loss` exports." if rec.single else
           "It is the knee of the Pareto front: the best balance of the objectives, the trial "
           "`--pick knee` exports.")
    out = ["## Recommendation", "", f"**Run trial #{rec.trial}**: {rec.recipe} ({values}). {why}",
           ""]
    if rec.ties:
        out += [rec.ties, ""]
    if rec.alternatives:
        out += ["Alternatives on the front, against it:", ""]
        out += [f"- {a}" for a in rec.alternatives] + [""]
    out += ["How sure:", ""] + [f"- {c}" for c in rec.confidence] + [""]
    if rec.warnings:
        out += ["Check:", ""] + [f"- {w}" for w in rec.warnings] + [""]
    out += ["Launch it:", "", "```bash", rec.command, "```"]
    return out
