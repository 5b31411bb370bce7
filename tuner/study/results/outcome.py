"""How one trial's end becomes an Optuna outcome (`tuner.study.store.records` is the contract).

Pure logic, no Ray, no Optuna: the trial function sends a `TrialReport`; `decide` turns it into
an `Outcome` (state, objective values, constraint values, reason) that the searcher tells Optuna.

- ok, finite, every constraint met            → complete
- ok but diverged / a spec constraint violated → infeasible (COMPLETE, a constraint > 0)
- out of memory, or past the time limit       → infeasible (constraint ``out_of_memory`` = 1:
                                                 a resource limit broken; the reason says which)
- exception in the trial                        → fail, with the traceback's last lines
- stopped by the scheduler                      → pruned
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from trainers import ModelArgs, Recipe, TrainResult
from trainers.result import is_usable
from tuner.study.results.reasons import Reason, join_text
from tuner.study.specs.metrics import (
    MetricContext,
    constraint_target,
    constraint_value,
    get_metric,
)
from tuner.study.store import records

if TYPE_CHECKING:  # the trial workers import this module; they need no spec (nor Optuna)
    from tuner.study.specs.spec import StudySpec

Status = Literal["ok", "oom", "timeout", "error"]
State = Literal["complete", "infeasible", "pruned", "fail"]
VIOLATED, SATISFIED = 1.0, -1.0


@dataclass(frozen=True, kw_only=True)
class TrialReport:
    """What the trial function sends back when it ends (JSON-safe via `to_dict`)."""

    status: Status
    result: dict[str, Any] | None = None  # TrainResult.to_dict()
    reason: Reason | None = None  # why the run did not produce a result (oom, timeout, error)
    environment: dict[str, Any] = field(default_factory=dict)  # torch_version, device, node
    # the timing of the trial's systems signature (records.TIMING), in a study that times them
    timing: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "result": self.result,
                "reason": self.reason.to_list() if self.reason else None,
                "environment": self.environment, "timing": self.timing}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrialReport:
        reason = d.get("reason")
        return cls(status=d["status"], result=d.get("result"),
                   reason=Reason(*reason) if reason else None,
                   environment=dict(d.get("environment") or {}),
                   timing=dict(d["timing"]) if d.get("timing") else None)


@dataclass(frozen=True, kw_only=True)
class Outcome:
    state: State
    values: tuple[float, ...] | None = None
    constraints: dict[str, float] = field(default_factory=dict)
    reasons: tuple[Reason, ...] = ()

    @property
    def reason(self) -> str:
        return join_text(self.reasons)


def constraint_names(spec: StudySpec) -> tuple[str, ...]:
    """Every trial told COMPLETE sets all of these, so each sampler sees a fixed-length vector."""
    return (*(k for k, _ in spec.constraints), records.DIVERGED, records.OUT_OF_MEMORY)


def decide(report: TrialReport, *, spec: StudySpec, recipe: Recipe, model_args: ModelArgs,
           observed: Mapping[str, Sequence[float]] | None = None,
           timing: Mapping[str, Any] | None = None) -> Outcome:
    """The outcome of a trial that ran to its end (pruned trials never get here).

    Args:
        observed: finite values seen so far per objective, for metrics without a fixed worst.
        timing: the timing of the trial's systems signature when the report lacks it (it
            reached the driver in an earlier report).
    """
    if report.status == "error":
        return Outcome(state="fail", reasons=(report.reason or Reason(kind="other",
                                                                          detail="error"),))
    ctx = MetricContext(spec=spec, recipe=recipe, model_args=model_args,
                        timing=report.timing or timing)
    if report.status in ("oom", "timeout"):  # a resource limit broken: no result to score
        worst = tuple(_worst(n, d, ctx, observed) for n, d in spec.objectives)
        oom_cons = {n: VIOLATED for n in constraint_names(spec)}
        oom_cons[records.DIVERGED] = SATISFIED
        return Outcome(state="infeasible", values=worst, constraints=oom_cons,
                       reasons=(report.reason or Reason(kind="out_of_memory"),))
    assert report.result is not None, "an ok report carries its TrainResult"
    result = TrainResult.from_dict(report.result)
    values: list[float] = []
    reasons: list[Reason] = []
    for name, direction in spec.objectives:
        v = float(get_metric(name).fn(result, ctx))
        values.append(v if is_usable(v) else _worst(name, direction, ctx, observed))
    cons: dict[str, float] = {}
    for key, limit in spec.constraints:
        metric, kind = constraint_target(key)
        v = float(get_metric(metric).fn(result, ctx))
        cons[key] = constraint_value(v, limit, kind)
        if cons[key] > 0:
            op = "<=" if kind == "upper" else ">="
            reasons.append(Reason(kind="constraint", subject=key,
                                  detail=f"{v:.4g} violates {op} {limit:g}"))
    cons[records.DIVERGED] = VIOLATED if result.diverged else SATISFIED
    cons[records.OUT_OF_MEMORY] = SATISFIED
    if result.diverged:
        reasons.insert(0, Reason(kind="diverged", detail=str(result.diverged_step)))
    elif not all(is_usable(float(get_metric(n).fn(result, ctx))) for n, _ in spec.objectives):
        cons[records.DIVERGED] = VIOLATED  # a non-finite objective is a divergence in effect
        reasons.insert(0, Reason(kind="non_finite"))
    state: State = "infeasible" if any(c > 0 for c in cons.values()) else "complete"
    return Outcome(state=state, values=tuple(values), constraints=cons, reasons=tuple(reasons))


def _worst(name: str, direction: str, ctx: MetricContext,
           observed: Mapping[str, Sequence[float]] | None) -> float:
    metric = get_metric(name)
    if metric.worst is not None:
        return float(metric.worst(ctx))
    seen = [v for v in (observed or {}).get(name, ()) if is_usable(v)]
    if not seen:
        return 0.0
    return max(seen) if direction == "minimize" else min(seen)
