"""The spec's ``[start]`` table: what a study evaluates, or learns from, before its sampler's own
proposals.

    [start]
    baselines = ["deepseek-v3"]                 # published recipes, mapped to the proxy
    enqueue = [{lr = 1e-3, precision = "fp8"}]  # points of the space, evaluated first
    warm_start = "small-study"                  # another study's trials, for the sampler
    warm_start_storage = ""                     # its database ("":
    tuner.study.run.warm_start)

`parse_start` checks every rule that needs no file or database: each enqueued key is a searched
parameter, its value one the parameter can take (inside its range, on its step, among its
choices) and sampled under the point's own values; a baseline is known and its categorical
values are choices the space offers. Numeric baseline values depend on the proxy, so they are
computed, and clipped to the space, when the study is created (`tuner.study.run.start`). The
study checks that warm_start names a study with the same objectives
(`tuner.study.run.warm_start`). Errors are `StartError` naming the field
(``start.enqueue[1].lr``), the rule and the value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import optuna

from search_spaces.loader import Distribution, Param, SearchSpace
from trainers.config.validation import FieldError, reject_unknown, require
from tuner.modeling.baselines import BASELINES, categorical_values
from tuner.study.specs.urls import URL_PREFIXES, shown

KEYS = ("baselines", "enqueue", "warm_start", "warm_start_storage")


class StartError(FieldError):
    """A ``[start]`` value breaks a rule; the message names the field, the rule and the value."""


@dataclass(frozen=True, kw_only=True)
class StartSection:
    """Evaluated first: ``baselines`` (names of `tuner.modeling.baselines.BASELINES`), then the
    ``enqueue`` points; both count toward ``n_trials``. ``warm_start``: another study whose
    finished trials the sampler sees (never counted, ranked or exported here)."""

    baselines: tuple[str, ...] = ()
    enqueue: tuple[dict[str, Any], ...] = ()
    warm_start: str = ""
    warm_start_storage: str = ""

    @property
    def n_points(self) -> int:
        """How many trials the baselines and enqueued points take."""
        return len(self.baselines) + len(self.enqueue)

    def to_dict(self) -> dict[str, Any]:
        """TOML-shaped, empty values left out (a study stored without them compares equal on
        resume), a password in ``warm_start_storage`` masked."""
        out = {"baselines": list(self.baselines), "enqueue": [dict(p) for p in self.enqueue],
               "warm_start": self.warm_start, "warm_start_storage": shown(self.warm_start_storage)
               if self.warm_start_storage else ""}
        return {k: v for k, v in out.items() if v}


def parse_start(table: Any, space: SearchSpace, *, study_name: str, n_trials: int,
                name_re: Any) -> StartSection:
    """Validate the ``[start]`` table against ``space`` (module docstring).

    Args:
        name_re: the pattern a study name must fully match (`tuner.study.specs.spec.NAME_RE`).

    Raises:
        StartError: the first rule broken.
    """
    require(isinstance(table, Mapping), "start", "must be a table", table, error=StartError)
    reject_unknown(table, KEYS, "start", error=StartError)
    baselines = _baselines(table.get("baselines", []), space)
    enqueue = _enqueue(table.get("enqueue", []), space)
    warm, storage = table.get("warm_start", ""), table.get("warm_start_storage", "")
    require(isinstance(warm, str), "start.warm_start", "must be a string (a study name)", warm,
            error=StartError)
    require(isinstance(storage, str), "start.warm_start_storage", "must be a string", storage,
            error=StartError)
    if warm:
        require(bool(name_re.fullmatch(warm)), "start.warm_start",
                "must be a study name (1-64 letters, digits, '_', '-', '.')", warm,
                error=StartError)
        require(warm != study_name, "start.warm_start",
                "must name another study (a study cannot warm-start from itself)", warm,
                error=StartError)
    if storage:
        require(bool(warm), "start.warm_start_storage", "is only valid with start.warm_start",
                shown(storage), error=StartError)
        require(storage.startswith(URL_PREFIXES), "start.warm_start_storage",
                "must be '' or a database URL (sqlite:///…, postgresql://…)", shown(storage),
                error=StartError)
    start = StartSection(baselines=baselines, enqueue=enqueue, warm_start=warm,
                         warm_start_storage=storage)
    require(start.n_points <= n_trials, "start",
            f"evaluates {start.n_points} point(s) first (baselines + enqueue), more than "
            f"study.n_trials = {n_trials}; raise n_trials or list fewer points", start.n_points,
            error=StartError)
    return start


def _baselines(value: Any, space: SearchSpace) -> tuple[str, ...]:
    require(isinstance(value, list), "start.baselines", "must be a list of names", value,
            error=StartError)
    for i, name in enumerate(value):
        where = f"start.baselines[{i}]"
        require(isinstance(name, str) and name in BASELINES, where,
                f"must be a named baseline, one of {sorted(BASELINES)}", name, error=StartError)
        require(value.index(name) == i, where, "must not repeat a baseline", name,
                error=StartError)
        for field, choice in categorical_values(BASELINES[name]).items():
            param = _param(space, field)
            if param is None or not isinstance(param.distribution,
                                               optuna.distributions.CategoricalDistribution):
                continue  # not searched: every trial gets the study's own value
            require(choice in param.distribution.choices, where,
                    f"{name!r} sets {field} = {choice!r}, which the space's choices "
                    f"{list(param.distribution.choices)} do not hold (a choice has no nearest "
                    f"value to clip to); add it to the choices or drop the baseline", name,
                    error=StartError)
    return tuple(value)


def _enqueue(value: Any, space: SearchSpace) -> tuple[dict[str, Any], ...]:
    require(isinstance(value, list), "start.enqueue",
            "must be a list of tables, e.g. [{lr = 1e-3}]", value, error=StartError)
    points = []
    for i, point in enumerate(value):
        where = f"start.enqueue[{i}]"
        require(isinstance(point, Mapping) and len(point) > 0, where,
                "must be a non-empty table of searched parameters", point, error=StartError)
        for key, v in point.items():
            param = _param(space, key)
            if param is None:
                fixed = f" ({key} is fixed to {space.fixed[key]!r})" if key in space.fixed else ""
                raise StartError(f"{where}.{key}: must be a searched parameter of the space "
                                 f"{list(space.names())}{fixed}, but got {key}={v!r}.",
                                 f"{where}.{key}")
            require(contains(param.distribution, v), f"{where}.{key}",
                    f"must be a value the parameter can take ({_describe(param.distribution)})",
                    v, error=StartError)
        _check_active(dict(point), space, where)
        _check_recipe(dict(point), space, where)
        points.append(dict(point))
    return tuple(points)


def _check_active(point: dict[str, Any], space: SearchSpace, where: str) -> None:
    """Every key must be sampled under the point's own values (a ``when`` condition on a
    parameter the point leaves to the sampler cannot be known in advance)."""
    values = {**space.fixed, **point}
    for p in space.params:
        if p.name not in point:
            continue
        for key, allowed in p.when:
            require(key in values and values[key] in allowed, f"{where}.{p.name}",
                    f"is sampled only when {key} is one of {list(allowed)}, so the point must "
                    f"set {key} to one of them", values.get(key, "(left to the sampler)"),
                    error=StartError)


def _check_recipe(point: dict[str, Any], space: SearchSpace, where: str) -> None:
    """A point that sets every parameter it makes active is a whole recipe: one `Recipe`
    rejects (say batch_start > batch_end on a ramp) is refused here rather than run as a failed
    trial. A point that leaves some to the sampler is checked when the trial runs."""
    values: dict[str, Any] = dict(space.fixed)
    for p in space.params:
        if p.active(values):
            if p.name not in point:
                return
            values[p.name] = point[p.name]
    try:
        space.to_recipe(point)
    except ValueError as e:
        raise StartError(f"{where}: must be a recipe Recipe accepts ({e}), but got "
                         f"{point!r}.", where) from None


def _param(space: SearchSpace, name: str) -> Param | None:
    return next((p for p in space.params if p.name == name), None)


def contains(d: Distribution, v: Any) -> bool:
    """Optuna's own membership test (range, step, choices) after the type checks it leaves out
    (a bool is no number; an int parameter takes integers only)."""
    if isinstance(d, optuna.distributions.CategoricalDistribution):
        return any(v == c and type(v) is type(c) for c in d.choices)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return False
    if isinstance(d, optuna.distributions.IntDistribution) and not isinstance(v, int):
        return False
    return bool(d._contains(float(v)))


def _describe(d: Distribution) -> str:
    if isinstance(d, optuna.distributions.CategoricalDistribution):
        return f"one of {list(d.choices)}"
    kind = "an integer" if isinstance(d, optuna.distributions.IntDistribution) else "a number"
    step = f" on steps of {d.step:g} from {d.low:g}" if d.step not in (None, 1) else ""
    return f"{kind} in [{d.low:g}, {d.high:g}]{step}"
