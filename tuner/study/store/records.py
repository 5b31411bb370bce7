"""What a moetune study keeps in Optuna storage: the contract between tuner, reports and export.

The storage is the truth. Everything a report or an export needs is read from here, never from
Ray's result folders, so a study in a shared PostgreSQL database is complete on its own.

Study level (``study.user_attrs``):
    SCHEMA       the version of this contract the study was written with (`SCHEMA_VERSION`);
                 absent in studies of schema 1. `tuner.study.store.storage` migrates older studies.
    SPEC         the validated study spec as a dict (``StudySpec.to_dict()``).
    OBJECTIVES   ``[[name, "minimize"|"maximize"], ...]`` in the order of ``trial.values``;
                 also set as ``study.metric_names``.
    CONSTRAINTS  ``{name: limit}`` from the spec's ``[constraints]`` table.
    VALIDATION   results of ``moetune validate`` (transfer confidence), when run.
    NOISE        run-to-run noise of val_loss, when measured: ``{"sd", "n", "how"}``, plus the
                 re-trained ``trials`` and their ``runs`` when `tuner.study.results.noise` measured
                 it; reports treat differences below it as ties (`tuner.study.results.noise.tied`).
    STOP         set (to who asked and when) to ask the study's driver, wherever it runs, to
                 stop: ``moetune cancel`` and the service write it (`tuner.study.store.control`).
    SERVICE      the service's record of a study it runs: owner, state, times
                 (`tuner.app.service`); absent for studies run from the command line.
    START        what the spec's ``[start]`` put in the study when it was created
                 (`tuner.study.run.start`): ``{"points": [{"point", "origin", "params",
                 "notes"}], "warm_start": {"study", "storage" (password masked), "added",
                 "skipped"}}``. Set once every point is enqueued and every warm-start trial added,
                 so a resume never enqueues or adds them again.
    TIMING_PREFIX + <signature>   one per systems signature a study with a timed metric
                 (``timed_tokens_per_s``) has timed (`tuner.study.trial.timing.probe`): median
                 ``tokens_per_s``, ``spread``, ``repeats``, ``seconds_per_step`` per timed batch
                 size, ``label`` (measured | emulated), ``signature``, ``what``, ``where``,
                 ``measured_at``, ``id``. Every trial of that signature, a resume's included,
                 reuses it.
    TIMING_SCOPE  the study's random id naming its timings' machine-local files (32 hex).

Trial level (``trial.user_attrs``), written for every trial that started training:
    RECIPE       ``Recipe.to_dict()``: the full recipe, fixed values included.
    MODEL_ARGS   ``ModelArgs.to_dict()``.
    METRICS      ``TrainResult.to_dict()`` without the curves (inf/NaN as strings: the codec
                 is `trainers.result.json_safe` / `to_float`).
    EVAL_CURVE   ``[[tokens_seen, val_loss], ...]`` at each evaluation; for a trial that ends
                 other than pruned also its Optuna intermediate values (step = tokens seen),
                 which optuna-dashboard draws as learning curves.
    TRAIN_CURVE  compact train-loss curve, ``[[tokens_seen, loss], ...]`` (at most
                 `trainers.result.MAX_CURVE_POINTS` points).
    SEED, CORPUS_HASH, TORCH_VERSION, DEVICE, NODE   to re-run the trial outside the service.
    RERUN_OF     on a trial that re-runs an interrupted one: that trial's number.
    ORIGIN       how the trial's point was chosen, when not by the sampler: ``enqueued`` (the
                 spec's ``[start] enqueue``), ``baseline:<name>`` (a named baseline, e.g.
                 ``baseline:deepseek-v3``), ``warm_start:<study>`` (a finished trial of another
                 study, added so the sampler sees it: never counted, ranked or exported here).
                 A re-run of an interrupted trial keeps it. Absent: proposed by the sampler.
    START_POINT  on an enqueued or baseline trial: its field in the spec
                 (``start.enqueue[1]``, ``start.baselines[0]``).
    WARM_START_OF  on a warm-start trial: ``{"study": name, "trial": number}`` it copies.
    TIMING       in a study with a timed metric: the timing of the trial's systems signature
                 (the study-level entry) plus ``source``: ``probed`` (this trial timed it),
                 ``study`` (stored before it started) or ``shared`` (another trial of the
                 study timed it on the same machine while this one waited).
    OUTCOME      one of OUTCOMES.
    REASONS      why a trial is not a plain success, as ``[[kind, subject, detail], ...]``
                 (`tuner.study.results.reasons.Reason`): a divergence, a violated constraint, out
                 of memory, pruned, interrupted, an exception with its traceback's tail, ...
    REASON       the same as one line of text ("diverged at step 12; constraint max_vio:
                 2.1 violates <= 2"), for people and for `moetune status`.

Optuna state per outcome:
    complete    TrialState.COMPLETE, values = objectives, every constraint <= 0.
    infeasible  TrialState.COMPLETE, values = objectives (worst-case finite values when the run
                diverged or ran out of memory), at least one constraint > 0. Constraints are set
                with ``trial.set_constraint(name, value)`` (feasible iff value <= 0) so that
                Optuna's samplers learn to avoid the region.
    pruned      TrialState.PRUNED (its curve in the EVAL_CURVE attr only: TPE ranks pruned trials
                by their intermediate values).
    fail        TrialState.FAIL (exception or interrupted driver), REASON holds why.
    warm_start  TrialState.COMPLETE, values and constraints as this study's spec scores the
                other study's measured result (`tuner.study.run.warm_start`); ORIGIN says
                from where.
"""

from __future__ import annotations

from typing import Any

SCHEMA = "moetune.schema"
SCHEMA_VERSION = 3  # 1: REASON as text only; 2: REASONS typed; 3: warm-start copies
# (WARM_START_OF) sit among a study's trials, not its measurements: an older reader would rank them

SPEC = "moetune.spec"
OBJECTIVES = "moetune.objectives"
CONSTRAINTS = "moetune.constraints"
VALIDATION = "moetune.validation"
NOISE = "moetune.noise"
STOP = "moetune.stop"
SERVICE = "moetune.service"
# on a law's budget or a ladder's rung above the first: the law or ladder that created it; a
# stage runs only in the study its own law or ladder made (`tuner.study.workflows.stage`)
STAGE_OF = "moetune.stage_of"
START = "moetune.start"
TIMING_PREFIX = "moetune.timing:"
TIMING_SCOPE = "moetune.timing_scope"

RECIPE = "recipe"
MODEL_ARGS = "model_args"
METRICS = "metrics"
EVAL_CURVE = "eval_curve"
TRAIN_CURVE = "train_curve"
SEED = "seed"
CORPUS_HASH = "corpus_hash"
TORCH_VERSION = "torch_version"
DEVICE = "device"
NODE = "node"
RERUN_OF = "rerun_of"
ORIGIN = "origin"
START_POINT = "start_point"
WARM_START_OF = "warm_start_of"
TIMING = "timing"
OUTCOME = "outcome"
REASON = "reason"
REASONS = "reasons"

OUTCOMES = ("complete", "infeasible", "pruned", "fail", "warm_start")
WARM_START = "warm_start"  # the OUTCOME of a warm-start trial; its ORIGIN starts with it + ":"

# Constraint names used besides the spec's own limits (value 1.0 = violated, -1.0 = satisfied).
# OUT_OF_MEMORY is violated by a trial that broke a resource limit: out of memory (in the trainer,
# or its worker killed by Ray's memory monitor) or past resources.trial_timeout_s; REASONS say
# which.
DIVERGED = "diverged"
OUT_OF_MEMORY = "out_of_memory"


def rerun_attrs(t: Any) -> dict[str, Any]:
    """The user attributes the re-run of interrupted trial ``t`` (an Optuna trial) is enqueued
    with: RERUN_OF, and where its point came from (an enqueued or baseline point stays one when
    re-run)."""
    kept = {k: t.user_attrs[k] for k in (ORIGIN, START_POINT) if k in t.user_attrs}
    return {RERUN_OF: t.number, **kept}
