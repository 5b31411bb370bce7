"""The Ray Tune trial function: one proxy training, reported back to Tune.

Runs in a Ray worker. Imports Ray (to report) but not Optuna: the driver's searcher turns the
final report into an Optuna outcome. Every evaluation is reported as ``val_loss`` at
``tokens_seen`` so ASHA can stop laggards; the last report carries a `TrialReport` as JSON
under ``moetune_final`` (a string, so Ray's result flattening leaves it whole).

Every step of the training holds the machine's cores shared (`tuner.study.run.cores`), so a timing
probe of any study on the machine can pause it. In a study with a timed metric the config asks
for the timing of the trial's systems signature (``moetune_timing``: the study's cached timings
and its scope); the trial takes it from there or probes it (`tuner.study.run.timing.measure`)
before it trains, and sends it with every report.
"""

from __future__ import annotations

import json
import math
import platform
import socket
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray
import torch
from ray import tune

from trainers import ModelArgs, Recipe, TrainResult
from trainers.result import to_float
from tuner.corpus.build import load
from tuner.study.results.outcome import TrialReport
from tuner.study.results.reasons import Reason, exception_reason
from tuner.study.run import timing
from tuner.study.run.cores import gate_for

FINAL_KEY = "moetune_final"
ENV_KEY = "moetune_env"
TIMING_KEY = "moetune_timing"  # in a config: the request; in a report: the timing, as JSON
TIME_ATTR = "tokens_seen"
# a report before the trial trains, naming what it does first (``timing``: its systems
# signature timed with the cores held); no TIME_ATTR, so schedulers and curves ignore it
PHASE_KEY = "moetune_phase"
METRIC = "val_loss"
TRACEBACK_LINES = 8

Trainer = Callable[..., TrainResult]


@dataclass(frozen=True, kw_only=True)
class TrialJob:
    """What every trial of a study shares (sent once to the workers)."""

    model_args: dict[str, Any]
    # "stdlib" or an absolute path (spec validation resolves it): a worker runs in Ray's trial
    # folder, where a relative path would name nothing
    corpus: str
    vocab_size: int
    max_corpus_bytes: int  # checked again here: a folder may have grown since the spec check
    # text with a tokenizer: tokenized into this machine's cache by the first trial that needs
    # it (tuner.corpus); the others, and later trials, map the cached dataset
    tokenizer: str = ""
    text_field: str = "text"
    eod_token: str = ""
    token_budget: int
    eval_every_tokens: int
    seed: int
    cpus_per_trial: float
    gpus_per_trial: float


def run_trial(config: dict[str, Any], *, job: TrialJob, trainer: Trainer) -> None:
    """Ray Tune function trainable: ``config = {"recipe": {...}, "number": optuna trial no}``."""
    # Ray sets OMP threads from the actor's CPU share; torch's intra-op pool needs it too.
    torch.set_num_threads(max(1, int(job.cpus_per_trial)))
    env = environment(job)
    report = train_and_report(config, job=job, trainer=trainer, env=env)
    last = report.result.get("val_loss") if report.result else None
    tune.report({METRIC: _finite_or_inf(last), FINAL_KEY: json.dumps(report.to_dict())})


def train_and_report(config: dict[str, Any], *, job: TrialJob, trainer: Trainer,
                     env: dict[str, Any]) -> TrialReport:
    """Run the trainer; map how it ended to a `TrialReport` (never raises)."""
    timed: dict[str, Any] = {}  # the timing of the trial's systems signature, once known

    def on_eval(tokens_seen: int, metrics: dict[str, Any]) -> str | None:
        scalars = {k: float(v) for k, v in metrics.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        scalars[METRIC] = _finite_or_inf(metrics.get(METRIC))
        extra = {TIMING_KEY: json.dumps(timed)} if timed else {}
        tune.report({**scalars, TIME_ATTR: int(tokens_seen), ENV_KEY: json.dumps(env), **extra})
        return None  # ASHA stops the trial through Ray, not through the trainer

    try:
        recipe = Recipe.from_dict(config["recipe"])
        model_args = ModelArgs.from_dict(job.model_args)
        data = load(job.corpus, tokenizer=job.tokenizer, text_field=job.text_field,
                    eod_token=job.eod_token, vocab=job.vocab_size,
                    max_bytes=job.max_corpus_bytes)
        env["corpus_hash"] = data.hash
        request = config.get(TIMING_KEY)
        if request:
            tune.report({PHASE_KEY: "timing", METRIC: math.inf})  # the progress bar says so
            entry, source = timing.measure(
                model_args, recipe, token_budget=job.token_budget, data=data,
                device=env["device"], timer=timing.step_timer_for(trainer),
                scope=request["scope"], cached=request.get("cached") or ())
            timed.update(entry, source=source)
        result = trainer(model_args, recipe, data=data,
                         token_budget=job.token_budget, seed=job.seed, on_eval=on_eval,
                         eval_every_tokens=job.eval_every_tokens, device=env["device"],
                         **gate_for(trainer))
    except BaseException as e:  # noqa: B036 - every way out must be recorded against the trial
        if is_out_of_memory(e):
            return TrialReport(status="oom", reason=Reason(kind="out_of_memory",
                                                           detail=_one_line(e)),
                               environment=env, timing=timed or None)
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        return TrialReport(status="error", reason=exception_reason(traceback_tail(e)),
                           environment=env, timing=timed or None)
    return TrialReport(status="ok", result=result.to_dict(), environment=env,
                       timing=timed or None)


def is_out_of_memory(e: BaseException) -> bool:
    """CUDA's OutOfMemoryError, Python's MemoryError, or a RuntimeError saying so (CPU alloc)."""
    if isinstance(e, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(e, RuntimeError) and "out of memory" in str(e).lower()


def traceback_tail(e: BaseException, n: int = TRACEBACK_LINES) -> str:
    lines = "".join(traceback.format_exception(e)).rstrip().splitlines()
    return "\n".join(lines[-n:])


def environment(job: TrialJob) -> dict[str, Any]:
    device = "cuda" if job.gpus_per_trial > 0 and torch.cuda.is_available() else "cpu"
    return {"torch_version": torch.__version__, "device": device, "node": _node(),
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


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]
