"""The metric table: every name a study can optimise or constrain, as a function of one trial.

Every objective and constraint in a study spec names an entry here, and every process (the
driver, a Ray worker, a report) sees the same table because it is declared in this module, not
registered from elsewhere at import time. Measured entries read the `TrainResult`; the modeled
``full_peak_memory_gb`` and ``full_gpu_hours`` scale the trial's recipe to the spec's
``[full_run]`` with `tuner.modeling.full_run` (label ``modeled``); ``timed_tokens_per_s`` reads
the timing of the trial's systems signature, measured alone on the cores
(`tuner.study.trial.timing`). A program embedding moetune
can add its own with `register_metric`::

    register_metric(Metric(name="my_metric", fn=my_fn, direction="minimize",
                           label="measured", description="..."))

``fn(result, ctx)`` gets the `TrainResult` and a `MetricContext` (the spec, the trial's `Recipe`,
the proxy's `ModelArgs` and, in a timed study, the timing) and returns a float. A non-finite
value is replaced by the metric's worst case when the trial is recorded as infeasible.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from trainers.config.validation import field_error
from trainers.result import GIB, is_usable
from tuner.modeling.full_run import modeled_cost, target_of

if TYPE_CHECKING:
    from trainers import ModelArgs, Recipe, TrainResult

Direction = Literal["minimize", "maximize"]
DIRECTIONS = ("minimize", "maximize")


# The systems knobs: the recipe fields a timing reads (`tuner.study.trial.timing.what_key`,
# directly or through `run_steps`). A timing depends on these and the model args, on no other
# recipe field, and so does a timed metric.
SYSTEMS_FIELDS = frozenset({"seq_len", "micro_batch", "precision", "checkpoint_ratio",
                            "batch_schedule", "batch_start", "batch_end", "batch_ramp_fraction",
                            "batch_multiple"})


@dataclass(frozen=True, kw_only=True)
class MetricContext:
    """What a metric function may look at besides the `TrainResult`."""

    spec: Any  # tuner.study.specs.spec.StudySpec (Any: avoids an import cycle for registrants)
    recipe: Recipe
    model_args: ModelArgs
    # the timing of the trial's systems signature (records.TIMING), in a study that times them
    timing: Mapping[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class Metric:
    """One named metric.

    Fields:
        fn: ``fn(result, ctx) -> float``.
        direction: the natural direction (used to pick the worst case).
        label: ``"measured"``, ``"emulated"`` or ``"modeled"`` — shown in reports.
        worst: the value recorded for a run that produced no usable value (diverged, out of
            memory), as ``worst(ctx) -> float``; None = the worst finite value seen so far in
            the study for this objective (0.0 before any).
        depends_on: the recipe fields the metric can depend on (its importances rank these
            only); None = any field.
    """

    name: str
    fn: Callable[[TrainResult, MetricContext], float]
    direction: Direction
    label: str = "measured"
    description: str = ""
    worst: Callable[[MetricContext], float] | None = None
    depends_on: frozenset[str] | None = None


METRICS: dict[str, Metric] = {}


def register_metric(metric: Metric, *, replace: bool = False) -> None:
    """Add a metric to the registry (``replace=True`` to redefine an existing name)."""
    if metric.direction not in DIRECTIONS:
        raise ValueError(f"Metric.direction: must be one of {DIRECTIONS}, but got "
                         f"direction={metric.direction!r}.")
    if metric.name in METRICS and not replace:
        raise ValueError(f"Metric {metric.name!r} is already registered; pass replace=True.")
    METRICS[metric.name] = metric


def get_metric(name: str) -> Metric:
    """The registered metric ``name``; ValueError listing the valid names otherwise."""
    try:
        return METRICS[name]
    except KeyError:
        raise ValueError(f"unknown metric {name!r}; valid metrics are {sorted(METRICS)}.") \
            from None


def _uniform_loss(ctx: MetricContext) -> float:
    # A model that learned nothing predicts uniformly: loss = ln(vocab). A diverged run is
    # recorded there, a finite value the samplers can rank.
    return math.log(ctx.model_args.vocab_size)


for _m in (
    Metric(name="val_loss", fn=lambda r, c: r.val_loss, direction="minimize",
           description="held-out next-token loss at the end of training", worst=_uniform_loss),
    Metric(name="train_loss", fn=lambda r, c: r.train_curve[-1][1] if r.train_curve else math.inf,
           direction="minimize", description="last training loss", worst=_uniform_loss),
    Metric(name="tokens_per_s", fn=lambda r, c: r.tokens_per_s, direction="maximize",
           description="training throughput on the proxy", worst=lambda c: 0.0),
    Metric(name="peak_memory_gb", fn=lambda r, c: r.peak_memory_bytes / GIB,
           direction="minimize", description="peak memory of the proxy run (GiB)"),
    Metric(name="max_vio", fn=lambda r, c: r.max_vio_val, direction="minimize",
           description="MaxVio of expert load on the validation set"),
    Metric(name="max_vio_batch", fn=lambda r, c: r.max_vio_batch, direction="minimize",
           description="mean per-batch MaxVio"),
    Metric(name="loss_spikes", fn=lambda r, c: float(r.loss_spikes), direction="minimize",
           description="number of loss spikes"),
    Metric(name="grad_norm_max", fn=lambda r, c: r.grad_norm_max, direction="minimize",
           description="largest gradient norm"),
    Metric(name="train_time_s", fn=lambda r, c: r.train_time_s, direction="minimize",
           description="training wall time (s)"),
):
    register_metric(_m)


def _full_run_cost(result: TrainResult, ctx: MetricContext) -> tuple[float, float]:
    """(peak GiB per GPU, GPU-hours) of the spec's full run for this trial's recipe."""
    spec = ctx.spec
    if not spec.full_run_target:
        raise ValueError("full_peak_memory_gb / full_gpu_hours need [model] full = <config JSON> "
                         "or [full_run] target in the study spec.")
    f = spec.full_run
    target = target_of(spec.full_run_target, f.hardware, f.gpus, f.tokens, f.seq_len)
    return modeled_cost(ctx.recipe, ctx.model_args, target, result.token_budget)


# The only proxy recipe field the full run's modeled cost reads: its batch, checkpoint ratio,
# sequence length and micro batch are the target's (B_opt, the memory model, [full_run]).
FULL_RUN_COST_FIELDS = frozenset({"precision"})

for _m in (
    Metric(name="full_peak_memory_gb", fn=lambda r, c: _full_run_cost(r, c)[0],
           direction="minimize", label="modeled", depends_on=FULL_RUN_COST_FIELDS,
           description="modeled per-GPU peak memory (GiB) of the spec's [full_run]"),
    Metric(name="full_gpu_hours", fn=lambda r, c: _full_run_cost(r, c)[1],
           direction="minimize", label="modeled", depends_on=FULL_RUN_COST_FIELDS,
           description="modeled GPU-hours of the spec's [full_run]"),
):
    register_metric(_m)


def _timed(result: TrainResult, ctx: MetricContext) -> float:
    return float(ctx.timing["tokens_per_s"]) if ctx.timing else math.nan


register_metric(Metric(
    name="timed_tokens_per_s", fn=_timed, direction="maximize",
    label="measured", worst=lambda c: 0.0, depends_on=SYSTEMS_FIELDS,
    description="training throughput of the trial's systems signature, timed alone on the "
                "cores (median of repeats; the spread is stored with it)"))

# Metrics read from a timing of the trial's systems signature (`tuner.study.trial.timing`): a study
# naming one times each signature once, alone on the machine's cores.
TIMED = ("timed_tokens_per_s",)


def names_timed(spec: Any) -> bool:
    """Whether ``spec`` (a StudySpec) names a `TIMED` metric as an objective or constraint."""
    names = [n for n, _ in spec.objectives]
    names += [constraint_target(k)[0] for k, _ in spec.constraints]
    return any(n in TIMED for n in names)


# Each trial's own timing of itself. On a machine that other trials, studies or users share it
# measures the load at that moment as much as the recipe (the same recipe and seed give the same
# val_loss in two studies, not the same tokens/s), so a spec naming one as an objective or
# constraint gets `load_warning`.
LOAD_DEPENDENT = ("tokens_per_s", "train_time_s")


def load_warning(name: str, role: str) -> str:
    """What a load-dependent metric (`LOAD_DEPENDENT`) measures, for a spec or a report naming
    it as ``role`` ("objective" or "constraint")."""
    return (f"{role} {name} is each trial's own timing on a machine other work may share: it "
            "measures the load at that moment as much as the recipe, so its differences may not "
            "be the recipe's; timed_tokens_per_s (each systems signature timed alone on the "
            "cores) and the modeled full_gpu_hours / full_peak_memory_gb ([full_run]) carry no "
            "machine noise.")


def depends_on(name: str, field: str) -> bool:
    """Whether metric ``name`` can depend on recipe field ``field`` (`Metric.depends_on`; an
    unregistered name or a metric that declares nothing: any field)."""
    metric = METRICS.get(name)
    return metric is None or metric.depends_on is None or field in metric.depends_on


def is_modeled(name: str) -> bool:
    """Whether metric ``name`` is a model's estimate, never a measurement."""
    metric = METRICS.get(name)
    return metric is not None and metric.label == "modeled"


def constraint_target(key: str) -> tuple[str, Literal["upper", "lower"]]:
    """Parse a ``[constraints]`` key into (metric, bound kind).

    ``<metric>`` or ``max_<metric>`` is an upper bound, ``min_<metric>`` a lower bound:
    ``max_peak_memory_gb = 4.0`` → peak_memory_gb <= 4; ``max_vio = 0.5`` → max_vio <= 0.5;
    ``min_tokens_per_s = 1e4`` → tokens_per_s >= 1e4.

    Raises:
        FieldError: the key names no registered metric (``field`` ``constraints.<key>``).
    """
    if key in METRICS:
        return key, "upper"
    for prefix, kind in (("max_", "upper"), ("min_", "lower")):
        if key.startswith(prefix) and key[len(prefix):] in METRICS:
            return key[len(prefix):], kind  # type: ignore[return-value]
    raise field_error(f"constraints.{key}", f"must be <metric>, max_<metric> or min_<metric> "
                      f"with a metric in {sorted(METRICS)}", key)


def constraint_value(value: float, limit: float, kind: str) -> float:
    """Optuna's convention: feasible iff the returned value <= 0 (a value that is not
    `is_usable`, NaN, inf or a blow-up, is violated)."""
    if not is_usable(value):
        return 1.0
    return value - limit if kind == "upper" else limit - value
