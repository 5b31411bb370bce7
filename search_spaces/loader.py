"""Declarative search spaces: TOML → validated `SearchSpace` → Optuna distributions → `Recipe`.

A space file declares each knob under ``[params.<recipe field>]`` and pins others under
``[fixed]``::

    [params.lr]
    type = "float"            # float | int | categorical
    low = 1e-4
    high = 1e-2
    log = true                # or  step = 0.001  (not both)

    [params.batch_schedule]
    type = "categorical"
    choices = ["constant", "linear", "step"]

    [params.batch_ramp_fraction]
    type = "float"
    low = 0.02
    high = 0.3
    when = { batch_schedule = ["linear", "step"] }   # sampled only under these values

    [fixed]
    seq_len = 128

Names must be `Recipe` fields, and every value a param can take on its own (each end of a
range, each choice) must be one `Recipe` accepts. A ``when`` condition names a parameter declared
*before* it (or a ``[fixed]`` one) and lists the values under which the parameter is sampled;
otherwise the `Recipe` default applies. Conditions are data, never evaluated code.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from trainers.config.recipe import Recipe, field_names
from trainers.config.validation import FieldError, reject_unknown, require

KINDS = ("float", "int", "categorical")
PARAM_KEYS = {
    "float": ("type", "low", "high", "log", "step", "when"),
    "int": ("type", "low", "high", "log", "step", "when"),
    "categorical": ("type", "choices", "when"),
}
SPACE_KEYS = ("params", "fixed")
SPACES_DIR = Path(__file__).resolve().parent

RangeDistribution = optuna.distributions.IntDistribution | optuna.distributions.FloatDistribution
# the distributions a space can declare (Optuna's BaseDistribution has no choices, low or high)
Distribution = optuna.distributions.CategoricalDistribution | RangeDistribution


class SpaceError(FieldError):
    """A search-space file or table breaks a rule; ``field`` names where, the message the rule
    and the value."""


@dataclass(frozen=True, kw_only=True)
class Param:
    """One searched knob: its Optuna distribution and the condition under which it is sampled."""

    name: str
    distribution: Distribution
    when: tuple[tuple[str, tuple[Any, ...]], ...] = ()

    def active(self, point: Mapping[str, Any]) -> bool:
        """True when every ``when`` condition holds for the values chosen so far."""
        return all(point.get(k) in allowed for k, allowed in self.when)


@dataclass(frozen=True, kw_only=True)
class SearchSpace:
    """A validated search space: ordered params (conditions refer backwards) plus fixed values.

    Example:
        >>> space = load_space("quickstart.toml")  # doctest: +SKIP
        >>> recipe = space.to_recipe(study.ask())  # doctest: +SKIP
    """

    params: tuple[Param, ...]
    fixed: dict[str, Any] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict, compare=False)

    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def distributions(self) -> dict[str, optuna.distributions.BaseDistribution]:
        return {p.name: p.distribution for p in self.params}

    def has_conditions(self) -> bool:
        return any(p.when for p in self.params)

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """Sample the active params on an Optuna trial (define-by-run); returns them by name."""
        point: dict[str, Any] = dict(self.fixed)
        chosen: dict[str, Any] = {}
        for p in self.params:
            if p.active(point):
                chosen[p.name] = point[p.name] = _suggest(trial, p.name, p.distribution)
        return chosen

    def to_recipe(self, params: Mapping[str, Any], *, seed: int | None = None) -> Recipe:
        """The `Recipe` for a sampled point: fixed values, then params, then `Recipe` defaults.

        Raises:
            ValueError: the combination breaks a `Recipe` rule (the message names the field).
        """
        values = {**self.fixed, **dict(params)}
        if seed is not None:
            values["seed"] = seed
        return Recipe.from_dict(values)

    def to_dict(self) -> dict[str, Any]:
        """The TOML-shaped table this space was loaded from (stored with the study)."""
        return dict(self.source)

    def largest(self, name: str) -> Any:
        """The largest value a trial can get for the numeric `Recipe` field ``name``: its fixed
        value, the top of its range or choices, or the `Recipe` default (which also applies
        whenever a conditional param is not sampled)."""
        if name in self.fixed:
            return self.fixed[name]
        default = getattr(Recipe(), name)
        for p in self.params:
            if p.name == name:
                top = max(v for _, v in _values(p.distribution))
                return max(top, default) if p.when else top
        return default


def _suggest(trial: optuna.Trial, name: str, d: Distribution) -> Any:
    if isinstance(d, optuna.distributions.CategoricalDistribution):
        return trial.suggest_categorical(name, d.choices)
    if isinstance(d, optuna.distributions.IntDistribution):
        return trial.suggest_int(name, d.low, d.high, step=d.step, log=d.log)
    return trial.suggest_float(name, d.low, d.high, step=d.step, log=d.log)


def load_space(source: str | Path | Mapping[str, Any], *, base_dir: Path | None = None
               ) -> SearchSpace:
    """Load and validate a search space.

    Args:
        source: a path to a TOML file, a file name in ``search_spaces/`` (``"deepseek_v3.toml"``),
            or an already parsed table with ``params`` / ``fixed``.
        base_dir: where relative paths are looked up first (the study spec's folder).

    Raises:
        SpaceError: unreadable file, unknown key, bad bounds, unknown `Recipe` name, bad condition.
    """
    if isinstance(source, Mapping):
        return space_from_dict(source, where="space")
    path = resolve_space_path(source, base_dir=base_dir)
    try:
        table = tomllib.loads(path.read_text())
    except (ValueError, RecursionError) as e:  # TOMLDecodeError, 5000-digit ints, deep nesting
        raise SpaceError(f"{path}: not valid TOML ({e}).", str(path)) from None
    return space_from_dict(table, where=str(path))


def resolve_space_path(name: str | Path, *, base_dir: Path | None = None) -> Path:
    """A space file by path, or by name in the search_spaces package.

    A relative path is read from ``base_dir`` (the study spec's folder) alone, like every path
    in a spec, so the same spec finds the same file from any current folder; without a
    ``base_dir`` it is read from the current folder.
    """
    path = Path(name).expanduser()
    if not path.is_absolute():
        path = (base_dir or Path.cwd()) / path
    for c in (path, SPACES_DIR / Path(name).name):
        if c.is_file():
            return c.resolve()
    shipped = sorted(p.name for p in SPACES_DIR.glob("*.toml"))
    raise SpaceError(f"space.file: must name an existing file (a path, relative to the spec's "
                     f"folder, or one of {shipped} in {SPACES_DIR}), but got file={str(name)!r} "
                     f"(looked for {str(path)!r}).", "space.file")


def space_from_dict(table: Mapping[str, Any], *, where: str = "space") -> SearchSpace:
    """Validate a parsed space table (``params`` and ``fixed``) into a `SearchSpace`."""
    reject_unknown(table, SPACE_KEYS, where, error=SpaceError)
    params_t = table.get("params", {})
    fixed = table.get("fixed", {})
    require(isinstance(params_t, Mapping), f"{where}.params", "must be a table", params_t,
            error=SpaceError)
    require(isinstance(fixed, Mapping), f"{where}.fixed", "must be a table", fixed,
            error=SpaceError)
    require(len(params_t) > 0, f"{where}.params", "must declare at least one parameter",
            dict(params_t), error=SpaceError)
    valid = field_names()
    for name in list(params_t) + list(fixed):
        if name not in valid:
            raise SpaceError(f"{where}: {name!r} is not a Recipe field; valid names are "
                             f"{sorted(valid)}.", where)
    both = sorted(set(params_t) & set(fixed))
    require(not both, f"{where}.fixed", "must not repeat a searched parameter", both,
            error=SpaceError)
    params: list[Param] = []
    for name, spec in params_t.items():
        params.append(_param(name, spec, f"{where}.params.{name}", params, dict(fixed)))
    _check_fixed(dict(fixed), where)
    return SearchSpace(params=tuple(params), fixed=dict(fixed),
                       source={"params": {k: dict(v) for k, v in params_t.items()},
                               "fixed": dict(fixed)})


def _param(name: str, spec: Any, where: str, earlier: list[Param], fixed: dict[str, Any]
           ) -> Param:
    require(isinstance(spec, Mapping), where, "must be a table", spec, error=SpaceError)
    kind = spec.get("type")
    require(kind in KINDS, f"{where}.type", f"must be one of {KINDS}", kind, error=SpaceError)
    reject_unknown(spec, PARAM_KEYS[kind], where, error=SpaceError)
    dist = _categorical(spec, where) if kind == "categorical" else _numeric(kind, spec, where)
    _check_recipe_accepts(name, dist, where)
    when = _when(spec.get("when"), f"{where}.when", name, earlier, fixed)
    return Param(name=name, distribution=dist, when=when)


def _numeric(kind: str, spec: Mapping[str, Any], where: str) -> RangeDistribution:
    for key in ("low", "high"):
        require(key in spec, f"{where}.{key}", "is required", None, error=SpaceError)
        v = spec[key]
        if kind == "int":
            require(isinstance(v, int) and not isinstance(v, bool), f"{where}.{key}",
                    "must be an integer", v, error=SpaceError)
        else:
            require(isinstance(v, (int, float)) and not isinstance(v, bool), f"{where}.{key}",
                    "must be a number", v, error=SpaceError)
            require(math.isfinite(v), f"{where}.{key}", "must be finite (no NaN/inf)", v,
                    error=SpaceError)
    low, high = spec["low"], spec["high"]
    log, step = spec.get("log", False), spec.get("step")
    require(isinstance(log, bool), f"{where}.log", "must be true or false", log, error=SpaceError)
    require(low <= high, f"{where}", "`low <= high` must hold", f"low={low}, high={high}",
            error=SpaceError)
    if log:
        require(low > 0, f"{where}.low", "must be > 0 when log = true", low, error=SpaceError)
        require(step is None, f"{where}.step", "cannot be combined with log = true", step,
                error=SpaceError)
    if step is not None:
        ok = isinstance(step, int) if kind == "int" else isinstance(step, (int, float))
        require(ok and not isinstance(step, bool) and math.isfinite(step) and step > 0,
                f"{where}.step", "must be a finite number > 0", step, error=SpaceError)
    if kind == "int":
        return optuna.distributions.IntDistribution(low, high, log=log, step=step or 1)
    return optuna.distributions.FloatDistribution(float(low), float(high), log=log,
                                                  step=None if step is None else float(step))


def _categorical(spec: Mapping[str, Any], where: str
                 ) -> optuna.distributions.CategoricalDistribution:
    choices = spec.get("choices")
    require(isinstance(choices, list) and len(choices) > 0, f"{where}.choices",
            "must be a non-empty list", choices, error=SpaceError)
    assert isinstance(choices, list)  # require raised otherwise
    for c in choices:
        require(c is None or isinstance(c, (bool, int, float, str)), f"{where}.choices",
                "must hold only strings, numbers or booleans", c, error=SpaceError)
        require(not (isinstance(c, float) and not math.isfinite(c)), f"{where}.choices",
                "must not hold NaN or inf", c, error=SpaceError)
    require(len({repr(c) for c in choices}) == len(choices), f"{where}.choices",
            "must not repeat a value", choices, error=SpaceError)
    return optuna.distributions.CategoricalDistribution(choices)


def _values(dist: Distribution) -> list[tuple[str, Any]]:
    """The values that stand for a distribution, labelled by the key that declared them: each
    choice, or both ends of the range (Optuna has already lowered ``high`` onto the last step)."""
    if isinstance(dist, optuna.distributions.CategoricalDistribution):
        return [("choices", c) for c in dist.choices]
    return [("low", dist.low), ("high", dist.high)]


def _check_recipe_accepts(name: str, dist: Distribution, where: str) -> None:
    """Every value the param can take must pass `Recipe`'s own validation, so a range Recipe
    rejects fails here instead of as failed trials. Recipe's single-field rules are intervals
    or sets, so the ends of a range stand for all of it. Its one cross-field rule (batch_start
    <= batch_end for a ramp) is about combinations, which are recorded as failed trials; a
    constant schedule switches it off so each value is judged on its own."""
    base = {} if name == "batch_schedule" else {"batch_schedule": "constant"}
    for key, value in _values(dist):
        try:
            Recipe.from_dict({**base, name: value})
        except ValueError as e:
            # ``e`` already names the rule and the value ("..., but got ..."): said once
            raise SpaceError(f"{where}.{key}: every value must be one Recipe accepts; {e}",
                             f"{where}.{key}") from None


def _when(when: Any, where: str, name: str, earlier: list[Param], fixed: dict[str, Any]
          ) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    if when is None:
        return ()
    require(isinstance(when, Mapping) and len(when) > 0, where,
            "must be a non-empty table {param = [values]}", when, error=SpaceError)
    known = {p.name: p for p in earlier}
    out = []
    for key, values in when.items():
        require(key != name, where, "must not refer to the parameter itself", key,
                error=SpaceError)
        require(key in known or key in fixed, where,
                f"must name a parameter declared before {name!r} or a fixed one "
                f"(declared before: {sorted(known)}, fixed: {sorted(fixed)})", key,
                error=SpaceError)
        require(isinstance(values, list) and len(values) > 0, f"{where}.{key}",
                "must be a non-empty list of values", values, error=SpaceError)
        if key in known:
            _check_values_in(known[key].distribution, values, f"{where}.{key}")
        out.append((key, tuple(values)))
    return tuple(out)


def _check_values_in(dist: Distribution, values: list[Any], where: str) -> None:
    for v in values:
        if isinstance(dist, optuna.distributions.CategoricalDistribution):
            ok = v in dist.choices
        else:
            ok = isinstance(v, (int, float)) and dist.low <= v <= dist.high
        require(ok, where, "must list values the parameter can take", v, error=SpaceError)


def _check_fixed(fixed: dict[str, Any], where: str) -> None:
    try:
        Recipe.from_dict(fixed)
    except ValueError as e:
        raise SpaceError(f"{where}.fixed: {e}", f"{where}.fixed") from None
