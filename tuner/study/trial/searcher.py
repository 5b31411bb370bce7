"""The Ray Tune ⇄ Optuna bridge: a Ray `Searcher` that asks and tells a persistent Optuna study.

The only module that imports both Ray and Optuna. It replaces Ray's ``OptunaSearch``
(ray-project/ray@01a29b09, python/ray/tune/search/optuna/optuna_search.py), which creates its
study with ``study_name="optuna"`` and ``load_if_exists=True`` and pickles its state in
``save()``. This one never joins an existing study by accident (the study is
created or loaded by name explicitly), every asked trial is told exactly once (a NaN, an error or
a crash cannot leave it RUNNING), multi-objective runs keep their evaluation curve, and resume
reads the storage instead of a pickle.

Trials are asked one at a time when Ray asks (``suggest``); with ``max_concurrent = 1`` the
sequence of proposals depends only on the spec, the seed and the results.

In a study with a timed metric (`metrics.TIMED`), each config also carries the study's stored
timings of the trial's configuration and the study's timing scope (`tuner.study.trial.timing`); the
timing a trial reports is stored on the study at once, so later trials of its systems signature
(and a resume) reuse it, and on the trial (records.TIMING).

Ray Tune pickles its search algorithm into the experiment folder (``tuner.pkl``). The searcher
pickles without its Optuna study, whose storage engine carries the database URL and its
password: a secret never reaches a Ray file, and nothing reads the searcher back from one.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import TrialState
from ray.tune.search import Searcher

from search_spaces.loader import SearchSpace
from trainers import ModelArgs, Recipe
from trainers.result import is_usable, json_safe, thin_curve, to_float
from tuner.study.results.outcome import Outcome, TrialReport, constraint_names, decide
from tuner.study.results.reasons import Reason
from tuner.study.specs.metrics import names_timed
from tuner.study.specs.spec import StudySpec
from tuner.study.store import records
from tuner.study.store.database import shown
from tuner.study.trial import timing
from tuner.study.trial.trainable import (
    ENV_KEY,
    FINAL_KEY,
    METRIC,
    PHASE_KEY,
    TIME_ATTR,
    TIMING_KEY,
)


@dataclass
class Tally:
    """Counts for the progress display, updated as trials start and end."""

    done: int = 0
    running: int = 0
    complete: int = 0
    infeasible: int = 0
    pruned: int = 0
    failed: int = 0
    interrupted: int = 0  # abandoned by a stopping driver: re-run on resume, so not done
    in_flight: float = 0.0  # the running trials' tokens trained, in trials' worth of budget
    timing: int = 0  # running trials timing their systems signature (the cores held for it)
    best_trial: int | None = None  # best by the first objective; `best` holds its own values
    best: dict[str, float] = field(default_factory=dict)


@dataclass
class _Live:
    trial: optuna.Trial
    recipe: Recipe
    eval_curve: list[list[float | str]] = field(default_factory=list)
    env: dict[str, Any] = field(default_factory=dict)
    final: dict[str, Any] | None = None  # the trial's final report, once it arrived
    # why the driver ended the trial (a time limit) or why its worker died (out of memory)
    ended_by: TrialReport | None = None
    timing: dict[str, Any] | None = None  # its systems signature's timing, once reported
    seen: int = 0  # tokens trained, as its last evaluation reported
    probing: bool = False  # timing its systems signature, before it trains


class StudySearcher(Searcher):
    """Proposes configs from an Optuna study and records every outcome in it.

    Args:
        study: the Optuna study (created or loaded by the caller, on persistent storage).
        spec: the validated spec; its space maps Optuna params to a `Recipe`.
        model_args: the proxy all trials train.
        n_to_run: how many more trials to start before answering FINISHED.
        on_change: called with the `Tally` whenever a trial starts or ends.
    """

    def __init__(self, *, study: optuna.Study, spec: StudySpec, model_args: ModelArgs,
                 n_to_run: int, tally: Tally | None = None,
                 on_change: Callable[[Tally], None] | None = None,
                 stopping: Any = None) -> None:
        super().__init__(metric=METRIC, mode="min")
        self._study = study
        self._spec = spec
        self._space: SearchSpace = spec.space
        self._model_args = model_args
        self.model_args = model_args
        self._left = n_to_run
        self._live: dict[str, _Live] = {}
        self.tally = tally or Tally()
        self._on_change = on_change or (lambda t: None)
        # the run's stop flag (``is_set()``): once set, no trial starts, and a trial Ray stops
        # without its final report is interrupted (re-run on resume), not pruned
        self._stopping = stopping
        self._timed = names_timed(spec)
        self._timings: dict[str, dict[str, Any]] = {}
        self._timing_scope = ""
        if self._timed:
            attrs = study.user_attrs
            self._timings = {k.removeprefix(records.TIMING_PREFIX): dict(v)
                             for k, v in attrs.items() if k.startswith(records.TIMING_PREFIX)}
            self._timing_scope = str(attrs.get(records.TIMING_SCOPE) or "")
            if not self._timing_scope:
                self._timing_scope = timing.new_scope()
                study.set_user_attr(records.TIMING_SCOPE, self._timing_scope)

    # -- Ray's Searcher API ------------------------------------------------------------------

    @property
    def timing_scope(self) -> str:
        """The study's timing scope ("" for a study without a timed objective)."""
        return self._timing_scope

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict,
                              **spec: Any) -> bool:
        return True  # the space comes from the spec, not from Tune's param_space

    # ray declares Optional[Dict], but documents and checks for the Searcher.FINISHED string too
    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:  # type: ignore[override]
        while self._left > 0 and not self._stop_requested():
            self._left -= 1
            trial = self._study.ask()
            try:
                params = self._space.suggest(trial)
            except Exception as e:  # a sampler error ends the run, but not with a RUNNING trial
                self._record(trial, _failed("sampler_failed", f"{type(e).__name__}: {e}"))
                raise
            try:
                recipe = self._space.to_recipe(params, seed=self._spec.study.seed)
            except ValueError as e:
                # The space allowed a combination Recipe rejects: record it, try the next point.
                self._record(trial, _failed("invalid_recipe", str(e)))
                continue
            trial.set_user_attr(records.RECIPE, recipe.to_dict())
            trial.set_user_attr(records.MODEL_ARGS, self._model_args.to_dict())
            trial.set_user_attr(records.SEED, self._spec.study.seed)
            self._live[trial_id] = _Live(trial=trial, recipe=recipe)
            self.tally.running += 1
            self._on_change(self.tally)
            config: dict[str, Any] = {"recipe": recipe.to_dict(), "number": trial.number}
            if self._timed:
                config[TIMING_KEY] = self._timing_request(recipe)
            return config
        return Searcher.FINISHED

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        live = self._live.get(trial_id)
        if live is not None and FINAL_KEY in result:
            live.final = result  # kept: the worker may die before Ray completes the trial
        if live is not None and result.get(PHASE_KEY) == "timing":
            live.probing = True
            self._update_in_flight()
            self._on_change(self.tally)
            return
        if live is None or TIME_ATTR not in result:
            return
        live.probing = False  # an evaluation: it trains
        live.eval_curve.append([int(result[TIME_ATTR]), _num(result[METRIC])])
        # stored at each evaluation, so the service's page draws a running trial's curve
        live.trial.set_user_attr(records.EVAL_CURVE, live.eval_curve)
        live.seen = int(result[TIME_ATTR])
        self._update_in_flight()
        self._on_change(self.tally)  # the progress bar moves within a trial
        if not live.env and ENV_KEY in result:
            live.env = json.loads(result[ENV_KEY])
            _write_env(live.trial, live.env)
        if live.timing is None and result.get(TIMING_KEY):
            self._note_timing(live, json.loads(result[TIMING_KEY]))

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        live = self._live.get(trial_id)
        if live is None:
            return
        if self._stop_requested() and live.ended_by is None and live.final is None \
                and not (result and FINAL_KEY in result):
            self._abandon(trial_id)  # stopped by the driver's stop, not by ASHA
            return
        try:
            outcome = self._outcome(live, result, error)
        except Exception as e:
            # Record the trial before the error ends the run: it must not stay RUNNING.
            self._finish(trial_id, _failed("driver_failed", f"{type(e).__name__}: {e}"))
            raise
        self._finish(trial_id, outcome)

    def _outcome(self, live: _Live, result: dict | None, error: bool) -> Outcome:
        if live.ended_by is not None:
            return decide(live.ended_by, spec=self._spec, recipe=live.recipe,
                          model_args=self._model_args, observed=self._observed(),
                          timing=live.timing)
        if not (result and FINAL_KEY in result) and live.final is not None:
            result = live.final
        if result and FINAL_KEY in result:
            report = TrialReport.from_dict(json.loads(result[FINAL_KEY]))
            if live.timing is None and report.timing:
                self._note_timing(live, report.timing)
            self._write_report_attrs(live, report)
            return decide(report, spec=self._spec, recipe=live.recipe,
                          model_args=self._model_args, observed=self._observed(),
                          timing=live.timing)
        if result and TIME_ATTR in result and not error:
            # The report that made ASHA stop the trial reaches only on_trial_complete.
            if not live.eval_curve or live.eval_curve[-1][0] != int(result[TIME_ATTR]):
                live.eval_curve.append([int(result[TIME_ATTR]), _num(result[METRIC])])
            return _pruned(live)
        if error:
            return _failed("worker_died")
        return _pruned(live)

    def _update_in_flight(self) -> None:
        budget = max(1, self._spec.budget.tokens_per_trial)
        self.tally.in_flight = sum(min(t.seen, budget) for t in self._live.values()) / budget
        self.tally.timing = sum(t.probing for t in self._live.values())

    def _finish(self, trial_id: str, outcome: Outcome) -> None:
        live = self._live.pop(trial_id)
        self.tally.running -= 1
        self._update_in_flight()
        live.trial.set_user_attr(records.EVAL_CURVE, live.eval_curve)
        if outcome.state != "pruned":
            _store_curve(live.trial, live.eval_curve)
        self._record(live.trial, outcome)

    # -- trials the driver ends, or whose worker dies ----------------------------------------

    def time_out(self, trial_id: str, limit_s: float) -> None:
        """The trial ran past the spec's wall-clock limit: it ends infeasible (reason
        ``timeout``) when Ray reports it ended, whatever it reports."""
        live = self._live.get(trial_id)
        if live is not None and live.final is None:
            live.ended_by = TrialReport(status="timeout", environment=live.env, reason=Reason(
                kind="timeout", detail=f"ran longer than resources.trial_timeout_s = {limit_s:g}"))

    def worker_died(self, trial_id: str, error_text: str) -> None:
        """Ray says the trial's worker died; when Ray's memory monitor killed it, the trial
        ends infeasible (out of memory) rather than failed."""
        live = self._live.get(trial_id)
        if live is not None and live.ended_by is None and _killed_for_memory(error_text):
            live.ended_by = TrialReport(status="oom", environment=live.env, reason=Reason(
                kind="out_of_memory", detail="the worker was killed by Ray's memory monitor"))

    def __getstate__(self) -> dict[str, Any]:
        """Everything but the study (its storage URL may carry a password), the callback and the
        stop flag (in-process only, and it may hold the study too); the spec goes with its
        ``study.storage`` masked (a spec may name its database, password and all)."""
        spec = self._spec
        masked = dataclasses.replace(spec, study=dataclasses.replace(
            spec.study, storage=shown(spec.study.storage)))
        return {**self.__dict__, "_study": None, "_on_change": None, "_live": {},
                "_stopping": None, "_spec": masked}

    def save(self, checkpoint_path: str) -> None:
        """Nothing to save: the Optuna storage is the searcher's state (no pickle resume)."""

    def restore(self, checkpoint_path: str) -> None:
        """Nothing to restore: `tuner.study.run.runner` resumes from the storage."""

    # -- recording ---------------------------------------------------------------------------

    def abandon_live(self) -> None:
        """Tell every trial still in flight FAIL (the driver is stopping) and queue its params,
        so that a resume re-runs exactly these points."""
        for trial_id in list(self._live):
            self._abandon(trial_id)

    def _abandon(self, trial_id: str) -> None:
        live = self._live.pop(trial_id)
        self.tally.running -= 1
        self._update_in_flight()
        self.tally.interrupted += 1
        live.trial.set_user_attr(records.EVAL_CURVE, live.eval_curve)
        self._record(live.trial, _failed("interrupted"), count=False)
        self._study.enqueue_trial(live.trial.params, user_attrs=records.rerun_attrs(live.trial))

    def _timing_request(self, recipe: Recipe) -> dict[str, Any]:
        """What a trial needs to find or make its timing: the study's scope and its stored
        timings of the same configuration (the worker matches where it runs)."""
        what = timing.what_key(self._model_args, recipe, self._spec.budget.tokens_per_trial)
        return {"scope": self._timing_scope,
                "cached": [e for e in self._timings.values() if e.get("what") == what]}

    def _note_timing(self, live: _Live, reported: dict[str, Any]) -> None:
        """Keep a trial's timing: on the trial, and on the study when its signature is new."""
        live.timing = reported
        live.trial.set_user_attr(records.TIMING, json_safe(reported))
        sig = str(reported.get("signature") or "")
        if sig and sig not in self._timings:
            entry = {k: v for k, v in reported.items() if k != "source"}
            self._timings[sig] = entry
            self._study.set_user_attr(records.TIMING_PREFIX + sig, json_safe(entry))

    def _stop_requested(self) -> bool:
        return self._stopping is not None and bool(self._stopping.is_set())

    def _write_report_attrs(self, live: _Live, report: TrialReport) -> None:
        t = live.trial
        if report.environment != live.env:
            _write_env(t, report.environment)
        if report.result is None:
            return
        metrics = {k: v for k, v in report.result.items()
                   if k not in ("eval_curve", "train_curve")}
        t.set_user_attr(records.METRICS, metrics)
        t.set_user_attr(records.CORPUS_HASH, report.result.get("corpus_hash", ""))
        t.set_user_attr(records.TRAIN_CURVE,
                        json_safe(thin_curve(report.result.get("train_curve", []))))
        if report.result.get("eval_curve"):
            live.eval_curve = [[int(a), _num(b)] for a, b in report.result["eval_curve"]]

    def _record(self, trial: optuna.Trial, outcome: Outcome, *, count: bool = True) -> None:
        trial.set_user_attr(records.OUTCOME, outcome.state)
        trial.set_user_attr(records.REASON, outcome.reason)
        trial.set_user_attr(records.REASONS, [r.to_list() for r in outcome.reasons])
        if outcome.state in ("complete", "infeasible"):
            for name in constraint_names(self._spec):
                trial.set_constraint(name, outcome.constraints[name])
            self._study.tell(trial, values=list(outcome.values or ()))
        elif outcome.state == "pruned":
            self._study.tell(trial, state=TrialState.PRUNED)
        else:
            self._study.tell(trial, state=TrialState.FAIL)
        if count:
            self._count(outcome, trial.number)
        else:
            self._on_change(self.tally)

    def _count(self, outcome: Outcome, number: int) -> None:
        t = self.tally
        t.done += 1
        if outcome.state == "complete":
            t.complete += 1
            # One trial's own values: per-objective bests would mix trials into a recipe that
            # never ran. "Best" = best first objective (val_loss in the shipped specs).
            values = outcome.values
            assert values is not None, "a complete outcome carries its objective values"
            (name, direction), v = self._spec.objectives[0], values[0]
            old = t.best.get(name)
            if old is None or (v < old if direction == "minimize" else v > old):
                t.best_trial = number
                t.best = dict(zip((n for n, _ in self._spec.objectives), values, strict=True))
        else:
            attr = {"infeasible": "infeasible", "pruned": "pruned", "fail": "failed"}
            setattr(t, attr[outcome.state], getattr(t, attr[outcome.state]) + 1)
        self._on_change(t)

    def _observed(self) -> dict[str, list[float]]:
        done = self._study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        return {name: [t.values[i] for t in done if is_usable(t.values[i])]
                for i, (name, _) in enumerate(self._spec.objectives)}


def _killed_for_memory(error_text: str) -> bool:
    """Whether Ray's error for a dead worker says its memory monitor killed it: Ray raises
    ``ray.exceptions.OutOfMemoryError`` ("Task was killed due to the node running low on
    memory", https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html)."""
    text = error_text.lower()
    return "outofmemoryerror" in text or "running low on memory" in text


def _pruned(live: _Live) -> Outcome:
    tokens = int(live.eval_curve[-1][0]) if live.eval_curve else 0
    return Outcome(state="pruned", reasons=(Reason(kind="pruned", detail=str(tokens)),))


def _failed(kind: str, detail: str = "") -> Outcome:
    return Outcome(state="fail", reasons=(Reason(kind=kind, detail=detail),))


def _write_env(trial: optuna.Trial, env: dict[str, Any]) -> None:
    trial.set_user_attr(records.TORCH_VERSION, env.get("torch_version", ""))
    trial.set_user_attr(records.DEVICE, env.get("device", ""))
    trial.set_user_attr(records.NODE, env.get("node", ""))
    if env.get("corpus_hash"):
        trial.set_user_attr(records.CORPUS_HASH, env["corpus_hash"])


def _store_curve(trial: optuna.Trial, points: list[list[float | str]]) -> None:
    """val_loss at each evaluation as Optuna intermediate values too (step = tokens seen), so
    optuna-dashboard draws learning curves. Written through the storage, as `Trial.report`
    does, because `Trial.report` refuses multi-objective studies. Only for trials that end
    other than pruned, when they end: TPE ranks pruned trials by their last intermediate value
    (and raises on that in a multi-objective study), so a pruned trial's curve stays in
    EVAL_CURVE alone and the samplers see what they saw before."""
    for tokens, value in points:
        trial.storage.set_trial_intermediate_value(trial._trial_id, int(tokens), to_float(value))


def _num(v: Any) -> float | str:
    num: float | str = json_safe(to_float(v))  # a float, or its string when not finite
    return num
