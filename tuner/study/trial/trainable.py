"""The Ray Tune trial function: one proxy training, reported back to Tune.

Runs in a Ray worker. Imports Ray (to report) but not Optuna: the driver's searcher turns the
final report into an Optuna outcome. Every evaluation is reported as ``val_loss`` at
``tokens_seen`` so ASHA can stop laggards; the last report carries a `TrialReport` as JSON
under ``moetune_final`` (a string, so Ray's result flattening leaves it whole).

The training itself is `tuner.study.trial.training.run_training`, as for every training moetune
runs: it sets the threads, picks the device, loads the corpus, and holds the machine's cores
shared at every step (`tuner.study.trial.cores`), so a timing probe of any study on the machine
can pause it; here its outcome becomes the trial's `TrialReport`. In a study with a timed
metric the config asks for the timing of the trial's systems signature (``moetune_timing``:
the study's cached timings and its scope); the trial takes it from there or probes it
(`tuner.study.trial.timing.measure`) before it trains, and sends it with every report.
"""

from __future__ import annotations

import json
import math
import platform
import socket
from dataclasses import replace
from typing import Any

import ray
import torch
from ray import tune

from trainers import ModelArgs, Recipe
from trainers.result import to_float
from tuner.study.results.outcome import TrialReport
from tuner.study.trial import timing
from tuner.study.trial.training import Trainer, Training, device_for, run_training

FINAL_KEY = "moetune_final"
ENV_KEY = "moetune_env"
TIMING_KEY = "moetune_timing"  # in a config: the request; in a report: the timing, as JSON
TIME_ATTR = "tokens_seen"
# a report before the trial trains, naming what it does first (``timing``: its systems
# signature timed with the cores held); no TIME_ATTR, so schedulers and curves ignore it
PHASE_KEY = "moetune_phase"
METRIC = "val_loss"


def run_trial(config: dict[str, Any], *, job: Training, trainer: Trainer) -> None:
    """Ray Tune function trainable: ``config = {"recipe": {...}, "number": optuna trial no}``;
    ``job`` is the study's `Training` (sent once to the workers), its recipe left empty."""
    env = environment(job)
    report = train_and_report(config, job=job, trainer=trainer, env=env)
    last = report.result.get("val_loss") if report.result else None
    tune.report({METRIC: _finite_or_inf(last), FINAL_KEY: json.dumps(report.to_dict())})


def train_and_report(config: dict[str, Any], *, job: Training, trainer: Trainer,
                     env: dict[str, Any]) -> TrialReport:
    """Run the trial's training (`run_training`, with ``config``'s recipe in ``job``) and
    report every evaluation to Tune; map how it ended to a `TrialReport` (raises only what
    `run_training` passes through)."""
    timed: dict[str, Any] = {}  # the timing of the trial's systems signature, once known

    def on_eval(tokens_seen: int, metrics: dict[str, Any]) -> str | None:
        scalars = {k: float(v) for k, v in metrics.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        scalars[METRIC] = _finite_or_inf(metrics.get(METRIC))
        extra = {TIMING_KEY: json.dumps(timed)} if timed else {}
        tune.report({**scalars, TIME_ATTR: int(tokens_seen), ENV_KEY: json.dumps(env), **extra})
        return None  # ASHA stops the trial through Ray, not through the trainer

    def before_train(model_args: ModelArgs, recipe: Recipe, data: Any, device: str) -> None:
        env["corpus_hash"] = data.hash
        request = config.get(TIMING_KEY)
        if request:
            tune.report({PHASE_KEY: "timing", METRIC: math.inf})  # the progress bar says so
            entry, source = timing.measure(
                model_args, recipe, token_budget=job.token_budget, data=data,
                device=device, timer=timing.step_timer_for(trainer),
                scope=request["scope"], cached=request.get("cached") or ())
            timed.update(entry, source=source)

    trained = run_training(replace(job, recipe=config["recipe"]), trainer=trainer,
                           on_eval=on_eval, before_train=before_train)
    if trained.status != "ok":
        return TrialReport(status=trained.status, reason=trained.reason, environment=env,
                           timing=timed or None)
    return TrialReport(status="ok", result=trained.result_or_raise().to_dict(), environment=env,
                       timing=timed or None)


def environment(job: Training) -> dict[str, Any]:
    return {"torch_version": torch.__version__, "device": device_for(job), "node": _node(),
            "python": platform.python_version()}


def _node() -> str:
    """host/ip/Ray node id (several Ray nodes may share one host)."""
    if not ray.is_initialized():
        return socket.gethostname()
    node_id = ray.get_runtime_context().get_node_id()
    return f"{socket.gethostname()}/{ray.util.get_node_ip_address()}/{node_id[:12]}"


def _finite_or_inf(v: Any) -> float:
    """ASHA ranks on this: anything but a finite loss is the worst."""
    f = to_float(v, math.inf)
    return f if math.isfinite(f) else math.inf

