"""What a new study evaluates first: the spec's ``[start]`` baselines and enqueued points, queued
once with Optuna's ``enqueue_trial``, and its warm start (`tuner.study.run.warm_start`).

Baselines come first, in the spec's order, then the enqueued points. Each is a point of the
space the searcher asks for before the sampler proposes anything; it runs as an ordinary trial,
counts toward ``n_trials`` and keeps ORIGIN (``baseline:<name>`` or ``enqueued``) and
START_POINT (its spec field). A point sets only searched parameters; the ones it leaves out are
the sampler's, and everything not searched is the study's own ``[space] fixed`` value or the
Recipe default, as for every trial.

A baseline's numbers depend on the proxy (`tuner.modeling.baselines`). A value outside the
space's range is clipped to the nearest end (and a stepped one put on its step), with a note
saying what moved: the nearest point the space holds is still the closest recipe to the
published one, and the note keeps it honest. ``submit`` prints the notes; the study stores them.

`begin` records START once everything is queued and added; until then each point is queued at
most once (its START_POINT is looked up first), so a driver that dies half-way and is resumed
neither loses nor doubles a point.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import optuna

from search_spaces.loader import Distribution, SearchSpace
from trainers.config.model_args import ModelArgs
from trainers.config.recipe import Recipe
from tuner.modeling.baselines import BASELINES, proxy_baseline
from tuner.study.run import warm_start as ws
from tuner.study.specs.spec import StudySpec
from tuner.study.store import records

ENQUEUED = "enqueued"


@dataclass(frozen=True, kw_only=True)
class StartPoint:
    """One point evaluated first."""

    point: str  # its spec field: "start.baselines[0]", "start.enqueue[1]"
    origin: str  # records.ORIGIN: "baseline:<name>" or "enqueued"
    params: dict[str, Any]
    notes: tuple[str, ...] = ()  # what was clipped, and from what

    def to_dict(self) -> dict[str, Any]:
        return {"point": self.point, "origin": self.origin, "params": dict(self.params),
                "notes": list(self.notes)}


def start_points(spec: StudySpec, model_args: ModelArgs) -> list[StartPoint]:
    """The baselines (mapped to ``model_args``, clipped to the space), then the enqueued points."""
    out = []
    for i, name in enumerate(spec.start.baselines):
        params, notes = baseline_params(name, spec, model_args)
        out.append(StartPoint(point=f"start.baselines[{i}]", origin=f"baseline:{name}",
                              params=params, notes=notes))
    out += [StartPoint(point=f"start.enqueue[{i}]", origin=ENQUEUED, params=dict(p))
            for i, p in enumerate(spec.start.enqueue)]
    return out


def baseline_params(name: str, spec: StudySpec, model_args: ModelArgs
                    ) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The searched parameters baseline ``name`` sets on this study's proxy, each inside the
    space (clipped), and a note per clip. Parameters the baseline does not define, or that are
    not sampled under its values (a ``when`` condition), are left to the sampler."""
    space: SearchSpace = spec.space
    seq_len = int(space.fixed.get("seq_len", Recipe().seq_len))
    rules = {r.field: r for r in proxy_baseline(BASELINES[name], model_args,
                                                proxy_tokens=spec.budget.tokens_per_trial,
                                                seq_len=seq_len)}
    values: dict[str, Any] = dict(space.fixed)
    params: dict[str, Any] = {}
    notes = []
    for p in space.params:
        if p.name not in rules or not p.active(values):
            continue
        wanted = rules[p.name].value
        value = clip(p.distribution, wanted)
        if value != wanted:
            notes.append(f"baseline {name}: {p.name} = {_fmt(wanted)} ({rules[p.name].rule}) "
                         f"is not a value the space holds ({_bounds(p.distribution)}): "
                         f"clipped to {_fmt(value)}")
        params[p.name] = values[p.name] = value
    return params, tuple(notes)


def clip(d: Distribution, value: Any) -> Any:
    """``value`` moved to the nearest value ``d`` can take: a range's nearer end, then its step
    grid. A choice is returned as is (`specs.start_spec` refused one the space lacks)."""
    if isinstance(d, optuna.distributions.CategoricalDistribution):
        return value
    v = min(max(float(value), d.low), d.high)
    if d.step is not None:
        v = min(d.low + round((v - d.low) / d.step) * d.step, d.high)
    if isinstance(d, optuna.distributions.IntDistribution):
        return int(round(v))
    return v if v != float(value) else value


def begin(study: optuna.Study, spec: StudySpec, *, points: Sequence[StartPoint],
          source: ws.WarmSource | None) -> None:
    """Queue the start points and add the warm-start trials, once per study (module docstring).

    ``points``: `start_points` of the spec (the preflight computed them); ``source``: the study
    to warm-start from, opened (None when the spec has none).
    """
    if not (spec.start.n_points or spec.start.warm_start) or records.START in study.user_attrs:
        return
    queued = {t.user_attrs.get(records.START_POINT) for t in study.get_trials(deepcopy=False)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        for p in points:
            if p.point not in queued:
                study.enqueue_trial(p.params, user_attrs={records.ORIGIN: p.origin,
                                                          records.START_POINT: p.point})
    warm = None
    if spec.start.warm_start:
        if source is None:
            raise ValueError(f"study {spec.name!r}: [start] warm_start is set, but no source "
                             "was opened (the preflight opens it)")
        warm = ws.add_warm_trials(study, spec, source)
    study.set_user_attr(records.START, {"points": [p.to_dict() for p in points],
                                        "warm_start": warm})


def _bounds(d: Distribution) -> str:
    if isinstance(d, optuna.distributions.CategoricalDistribution):
        return f"choices {list(d.choices)}"
    step = f", step {d.step:g}" if d.step not in (None, 1) else ""
    return f"[{d.low:g}, {d.high:g}]{step}"


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else repr(v)
