"""Run-to-run noise of val_loss, measured at the end of a study, and the tie rule that uses it.

With ``[study] noise_repeats = R`` (0, the default, measures nothing), once a study counts its
``n_trials`` the driver trains the ``noise_top`` feasible trials of lowest val_loss again, each
with R other seeds (the study's seed + 1 … + R), and stores the pooled standard deviation of
val_loss over those groups as the study attribute `records.NOISE`::

    {"sd": 0.012, "n": 6, "how": "2 recipe(s) x 3 seeds, pooled sd", "trials": [3, 7],
     "runs": [{"trial": 3, "seed": 1, "val_loss": 2.871}, ...]}

``n`` counts the runs behind ``sd``, the trials' own included. A run that diverges or raises is
kept in ``runs`` (val_loss "nan"/"inf", and ``error`` for an exception) and left out of ``sd``.

The re-trainings run after Ray Tune's trials have ended, with the trainer the study uses and
the trial's resources (``resources.cpus_per_trial`` threads, ``gpus_per_trial``): in a study
(``on_ray``) as Ray tasks, up to ``max_concurrent`` at once as the trials ran, so the cores the
trials used stay busy; called alone, in this process one after another. Each (trial, seed) run
is the same `Training`, run by `tuner.study.run.training.run_training` either way; a Ray task
receives that `Training` (no storage URL in it), the trial's number and the trainer. They are
not Optuna trials, so they never count toward ``n_trials``, are never seen by the sampler and
appear in no ranking. A resumed study measures again only when its top trials changed.

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

from trainers.result import json_safe, to_float
from tuner.study.results.metrics import TIMED, is_modeled
from tuner.study.results.ranking import knee, pareto_front
from tuner.study.results.trial_record import Objective, TrialRecord, trial_records
from tuner.study.run.training import Trained, Training, run_training
from tuner.study.specs.spec import StudySpec
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
    feasible ``recs`` — a bound on how far a median of the repeats moves (two studies timing
    one signature differed by up to 8.6% where this gave ~10%: benchmarks/RESULTS.md, "Timed
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

    @property
    def judged(self) -> bool:
        return bool(self.noise)

    def sentence(self) -> str:
        """One sentence for the report, the recommendation and ``export --pick knee``."""
        who = f"the best trial #{self.knee}" if self.single else f"the knee #{self.knee}"
        others = "other feasible trials"
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
              ) -> KneeTies | None:
    """The knee of ``front`` (default: the Pareto set of the feasible ``recs``) and the trials
    tied with it (module docstring); None without a feasible trial.

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
                    measured=sd is not None, relative=relative)


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
    ok = [r for r in recs if r.feasible and r.trained and math.isfinite(_loss(r))]
    return sorted(ok, key=lambda r: (_loss(r), r.number))[:k]


def measure_noise(study: Any, spec: StudySpec, *, trainer: Callable[..., Any],
                  should_stop: Callable[[], bool] = lambda: False,
                  log: Log | None = None, on_ray: bool = False) -> dict[str, Any] | None:
    """Re-train the study's top trials with other seeds and store the spread as `records.NOISE`.

    Does nothing (returns the stored value, or None) when ``spec.study.noise_repeats`` is 0, when
    the stored measurement covers the same top trials, or when the study has no feasible trial.
    ``should_stop`` is polled before each run (``on_ray``: while the runs are in flight, which
    it then cancels); once it is true nothing is stored. ``on_ray``: run them as Ray tasks, up
    to ``study.max_concurrent`` at once, on the Ray this process is connected to.

    Returns:
        The stored NOISE dict, or None when nothing was measured.
    """
    s = spec.study
    if s.noise_repeats <= 0:
        return None
    top = top_trials(trial_records(study), s.noise_top)
    stored: dict[str, Any] | None = study.user_attrs.get(records.NOISE)
    if not top or (stored and stored.get("trials") == [r.number for r in top]):
        return stored
    jobs = [(r, seed) for r in top
            for seed in range(s.seed + 1, s.seed + 1 + s.noise_repeats)]
    if log is not None:
        log(f"{spec.name}: re-training its {len(top)} best trial(s) with {s.noise_repeats} other "
            f"seed(s) each ({len(jobs)} runs of {spec.budget.tokens_per_trial:,} tokens) to "
            "measure the run-to-run noise")
    retrain = _retrain_on_ray if on_ray and s.max_concurrent > 1 and len(jobs) > 1 else _retrain
    runs = retrain(jobs, spec, trainer=trainer, should_stop=should_stop, log=log)
    if runs is None:
        return None
    groups = [[_loss(r)] + [to_float(x["val_loss"]) for x in runs if x["trial"] == r.number]
              for r in top]
    sd = pooled_sd(groups)
    if not math.isfinite(sd):
        return None
    noise = {"sd": sd, "n": sum(len(g) for g in groups),
             "how": f"{len(top)} recipe(s) x {1 + s.noise_repeats} seeds, pooled sd",
             "trials": [r.number for r in top], "runs": runs}
    study.set_user_attr(records.NOISE, noise)
    return noise


Job = tuple[TrialRecord, int]  # a top trial and the seed it is re-trained with


def _retrain(jobs: Sequence[Job], spec: StudySpec, *, trainer: Callable[..., Any],
             should_stop: Callable[[], bool], log: Log | None) -> list[dict[str, Any]] | None:
    """The runs in this process, one after another; None when stopped before the last."""
    say = log or (lambda line: None)
    runs = []
    for r, seed in jobs:
        if should_stop():
            return None
        runs.append(retrain_run(r.number, training_of(r, seed, spec), trainer))
        say(_said(runs[-1], len(runs), len(jobs), spec.name))
    return runs


def _retrain_on_ray(jobs: Sequence[Job], spec: StudySpec, *, trainer: Callable[..., Any],
                    should_stop: Callable[[], bool],
                    log: Log | None) -> list[dict[str, Any]] | None:
    """The runs as Ray tasks with a trial's resources, at most ``max_concurrent`` in flight;
    in ``jobs``' order, as `_retrain` gives them. None when stopped before the last (the runs
    in flight are cancelled). A run whose worker dies (killed for memory, say) is recorded
    like a run that raised."""
    import ray  # only here: the tie rules above are imported by light commands

    say = log or (lambda line: None)
    res = spec.resources
    task = ray.remote(num_cpus=res.cpus_per_trial, num_gpus=res.gpus_per_trial,
                      max_retries=0)(retrain_run)
    todo = list(enumerate(jobs))
    flying: dict[Any, int] = {}
    runs: dict[int, dict[str, Any]] = {}
    try:
        while todo or flying:
            if should_stop():
                return None
            while todo and len(flying) < spec.study.max_concurrent:
                i, (r, seed) = todo.pop(0)
                flying[task.remote(r.number, training_of(r, seed, spec), trainer)] = i
            done, _ = ray.wait(list(flying), num_returns=1, timeout=1.0)
            for ref in done:
                i = flying.pop(ref)
                r, seed = jobs[i]
                try:
                    runs[i] = ray.get(ref)
                except Exception as e:  # noqa: BLE001 - the worker died: recorded on the run
                    runs[i] = {"trial": r.number, "seed": seed, "val_loss": "nan",
                               "error": f"{type(e).__name__}: {e}"[:300]}
                say(_said(runs[i], len(runs), len(jobs), spec.name))
    finally:
        for ref in flying:
            ray.cancel(ref, force=True)
    return [runs[i] for i in range(len(jobs))]


def training_of(r: TrialRecord, seed: int, spec: StudySpec) -> Training:
    """Trial ``r``'s recipe and model trained again with ``seed``, the study's budget, corpus
    and per-trial resources."""
    return Training(model_args=r.model_args_dict, recipe=r.recipe_dict, data=spec.data,
                    token_budget=spec.budget.tokens_per_trial, seed=seed,
                    eval_every_tokens=spec.budget.eval_every_tokens,
                    cpus=spec.resources.cpus_per_trial, gpus=spec.resources.gpus_per_trial)


def retrain_run(number: int, training: Training, trainer: Callable[..., Any]) -> dict[str, Any]:
    """One re-training of trial ``number`` (`run_training`), as a run: an exception is recorded
    on it (val_loss NaN), not raised: the study's trials are done, and one failed re-run leaves
    the others' spread usable."""
    return run_record(number, training.seed, run_training(training, trainer=trainer))


def run_record(number: int, seed: int, trained: Trained) -> dict[str, Any]:
    """The run as `records.NOISE` keeps it."""
    run: dict[str, Any] = {"trial": number, "seed": seed}
    if trained.status != "ok":
        return run | {"val_loss": "nan", "error": trained.error}
    return run | {"val_loss": json_safe(float(trained.result_or_raise().val_loss))}


def _said(run: dict[str, Any], k: int, n: int, name: str) -> str:
    """A progress line: the ``k``-th of ``n`` re-trainings of study ``name`` has ended."""
    return (f"{name}: re-training {k}/{n}: trial {run['trial']} with seed {run['seed']}: "
            f"val_loss {run['val_loss']}")


def _loss(r: TrialRecord) -> float:
    return to_float(r.metrics.get("val_loss"))
