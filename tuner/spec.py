"""StudySpec: a tuning study as declared in TOML, validated into frozen dataclasses.

Every error names the field, the rule and the value; unknown keys are rejected with the valid
ones listed. Nothing here writes to disk (it reads the spec, its space file, the model config and
the corpus), so the CLI can validate first and write nothing on bad input. Every relative path in
a spec is read from the spec file's folder and stored absolute, so Ray workers (which run in their
own trial folders) and a later ``resume`` from any folder see the same files.

    >>> spec = load_spec("search_spaces/quickstart.toml")  # doctest: +SKIP
    >>> spec.study.n_trials
    12
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# tuner.export registers the modeled full-run metrics (full_peak_memory_gb, full_gpu_hours) so
# specs can use them; it lives there because it shares the export's scaling rules and cost model.
import tuner.export  # noqa: F401
from search_spaces.loader import SearchSpace, SpaceError, load_space, space_from_dict
from trainers import ModelArgs, load_corpus
from tuner.objectives import DIRECTIONS, METRICS, constraint_target

SAMPLERS = ("tpe", "gp", "nsga2", "random", "auto")
SCHEDULERS = ("auto", "asha", "none")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
STDLIB_CORPUS = "stdlib"  # load_corpus's name for the built-in corpus, not a path
SECTIONS = ("study", "model", "data", "budget", "objectives", "constraints", "pruning",
            "resources", "space")

# database URLs a study may name (`tuner.storage` opens them with SQLAlchemy)
STORAGE_URL_PREFIXES = ("sqlite:///", "postgresql", "mysql")


class SpecError(ValueError):
    """A study spec breaks a rule; the message names the field, the rule and the value."""


@dataclass(frozen=True, kw_only=True)
class StudySection:
    name: str
    n_trials: int = 12
    max_concurrent: int = 2
    seed: int = 0
    sampler: str = "auto"
    # random trials before TPE/GP model the results; "auto" = tuner.samplers.startup_trials
    startup_trials: int | str = "auto"
    storage: str = ""  # "" = sqlite file in the study's run folder


@dataclass(frozen=True, kw_only=True)
class ModelSection:
    """Exactly one way to name the proxy: a preset, or a full config (+ the proxy preset size)."""

    preset: str = ""
    full: str = ""
    proxy: str = ""


@dataclass(frozen=True, kw_only=True)
class DataSection:
    corpus: str = STDLIB_CORPUS  # or an absolute path, once validated
    vocab_size: int = 0  # 0 = the corpus' own; else must equal it (256 for byte corpora)


@dataclass(frozen=True, kw_only=True)
class BudgetSection:
    tokens_per_trial: int = 200_000
    eval_every_tokens: int = 50_000


@dataclass(frozen=True, kw_only=True)
class PruningSection:
    scheduler: str = "auto"
    grace_tokens: int = 50_000
    reduction_factor: float = 3.0


@dataclass(frozen=True, kw_only=True)
class ResourcesSection:
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0


@dataclass(frozen=True, kw_only=True)
class StudySpec:
    """A validated study. ``objectives`` and ``constraints`` keep the spec's order."""

    study: StudySection
    model: ModelSection
    data: DataSection
    budget: BudgetSection
    objectives: tuple[tuple[str, str], ...]
    constraints: tuple[tuple[str, float], ...]
    pruning: PruningSection
    resources: ResourcesSection
    space: SearchSpace

    @property
    def name(self) -> str:
        return self.study.name

    def to_dict(self) -> dict[str, Any]:
        """TOML-shaped dict with the space inline, so a stored spec needs no other file."""
        return {
            "study": dataclasses.asdict(self.study),
            "model": {k: v for k, v in dataclasses.asdict(self.model).items() if v},
            "data": dataclasses.asdict(self.data),
            "budget": dataclasses.asdict(self.budget),
            "objectives": dict(self.objectives),
            "constraints": dict(self.constraints),
            "pruning": dataclasses.asdict(self.pruning),
            "resources": dataclasses.asdict(self.resources),
            "space": self.space.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, base_dir: Path | None = None) -> StudySpec:
        return spec_from_dict(d, base_dir=base_dir)


def load_spec(path: str | Path, *, overrides: Mapping[str, Any] | None = None) -> StudySpec:
    """Read and validate a study spec file.

    Args:
        path: the TOML file.
        overrides: ``{"study.name": "x", ...}`` applied before validation (CLI flags).

    Raises:
        SpecError: unreadable file, bad TOML, unknown key, or a value breaking a rule.
    """
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"spec: must be an existing file, but got {str(path)!r}.")
    try:
        table = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise SpecError(f"{path}: not valid TOML ({e}).") from None
    for dotted, value in (overrides or {}).items():
        section, key = dotted.split(".", 1)
        table.setdefault(section, {})[key] = value
    return spec_from_dict(table, base_dir=path.resolve().parent)


def spec_from_dict(d: Mapping[str, Any], *, base_dir: Path | None = None) -> StudySpec:
    """Validate a parsed spec table (see `load_spec`)."""
    _reject_unknown(d, SECTIONS, "spec")
    for key in SECTIONS:
        _require(isinstance(d.get(key, {}), Mapping), key, "must be a table", d.get(key))
    _require("study" in d, "study", "is required (at least [study] name = ...)", None)
    study = _section(StudySection, d["study"], "study")
    _check_study(study)
    model = _model(d.get("model", {}), base_dir)
    data = _section(DataSection, d.get("data", {}), "data")
    _require(isinstance(data.vocab_size, int) and data.vocab_size >= 0, "data.vocab_size",
             "must be an integer >= 0 (0 = the corpus' own)", data.vocab_size)
    budget = _section(BudgetSection, d.get("budget", {}), "budget")
    pruning = _section(PruningSection, d.get("pruning", {}), "pruning")
    budget, pruning = _relative_defaults(budget, pruning, d)
    _check_budget(budget, pruning)
    resources = _section(ResourcesSection, d.get("resources", {}), "resources")
    _check_resources(resources)
    objectives = _objectives(d.get("objectives", {"val_loss": "minimize"}))
    pruning = _resolve_pruning(pruning)
    constraints = _constraints(d.get("constraints", {}))
    _check_full_run_metrics(model, objectives, constraints)
    space = _space(d.get("space"), base_dir)
    data = _check_data(data, budget, space, base_dir)
    return StudySpec(study=study, model=model, data=data, budget=budget, objectives=objectives,
                     constraints=constraints, pruning=pruning, resources=resources, space=space)


def _check_full_run_metrics(model: Any, objectives: tuple, constraints: tuple) -> None:
    """full_* metrics model the run of `[model] full`; without it there is nothing to model."""
    names = [n for n, _ in objectives] + [constraint_target(k)[0] for k, _ in constraints]
    for name in names:
        if name.startswith("full_"):
            _require(bool(model.full), f"objectives.{name}" if name in dict(objectives)
                     else "constraints", "needs [model] full = a DeepSeek config JSON (the full "
                     "run it models)", name)


def _section(cls: type, table: Mapping[str, Any], where: str) -> Any:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    _reject_unknown(table, tuple(fields), where)
    for key, value in table.items():
        want = {"str": str, "int": int, "float": float,
                "int | str": (int, str)}[str(fields[key].type)]
        ok = isinstance(value, want) and not isinstance(value, bool)
        if want is float:  # TOML writes 3 for 3.0
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            ok = ok and math.isfinite(value)
        _require(ok, f"{where}.{key}", f"must be {_kind(want)}", value)
    try:
        return cls(**table)
    except TypeError as e:  # a required key missing
        missing = [n for n, f in fields.items()
                   if f.default is dataclasses.MISSING and n not in table]
        raise SpecError(f"{where}.{missing[0] if missing else '?'}: is required ({e}).") from None


def _kind(t: type | tuple[type, ...]) -> str:
    if isinstance(t, tuple):
        return " or ".join(_kind(x) for x in t)
    return {int: "an integer", float: "a finite number", str: "a string"}.get(t, t.__name__)


def _check_study(s: StudySection) -> None:
    _require(bool(NAME_RE.match(s.name)), "study.name",
             "must be 1-64 characters of letters, digits, '_', '-', '.' (a folder name)", s.name)
    _require(s.n_trials >= 1, "study.n_trials", "must be >= 1", s.n_trials)
    _require(s.max_concurrent >= 1, "study.max_concurrent", "must be >= 1", s.max_concurrent)
    _require(s.seed >= 0, "study.seed", "must be >= 0", s.seed)
    _require(s.sampler in SAMPLERS, "study.sampler", f"must be one of {SAMPLERS}", s.sampler)
    _require(s.startup_trials == "auto" or (isinstance(s.startup_trials, int)
                                            and s.startup_trials >= 1),
             "study.startup_trials", "must be an integer >= 1 or \"auto\"", s.startup_trials)
    if s.sampler == "gp":
        _require(importlib.util.find_spec("scipy") is not None, "study.sampler",
                 "'gp' needs scipy installed (pip install scipy)", s.sampler)
    if s.storage:
        _require(s.storage.startswith(STORAGE_URL_PREFIXES), "study.storage",
                 "must be '' (a sqlite file in the run folder) or a database URL "
                 "(sqlite:///…, postgresql://…)", s.storage)


def _model(table: Mapping[str, Any], base_dir: Path | None) -> ModelSection:
    model = _section(ModelSection, table, "model")
    if not model.preset and not model.full:
        model = dataclasses.replace(model, preset="debug")
    if model.full:
        model = dataclasses.replace(model, full=_absolute(model.full, base_dir))
    _check_model(model)
    return model


def _check_model(m: ModelSection) -> None:
    given = [k for k in ("preset", "full") if getattr(m, k)]
    _require(len(given) == 1, "model", "must set exactly one of preset or full", given)
    if m.proxy:
        _require(bool(m.full), "model.proxy", "is only valid with model.full", m.proxy)
    if m.full:
        _require(Path(m.full).is_file(), "model.full", "must be an existing JSON file "
                 "(a relative path is read from the spec's folder)", m.full)
        try:
            ModelArgs.from_json(m.full)
        except (ValueError, TypeError, OSError, UnicodeDecodeError) as e:
            raise SpecError(f"model.full: must be a DeepSeek config JSON that ModelArgs "
                            f"accepts ({e}), but got {m.full!r}.") from None
    for key in ("preset", "proxy"):
        if getattr(m, key):
            _check_preset(key, getattr(m, key))


def _absolute(path: str, base_dir: Path | None) -> str:
    """``path`` read from the spec's folder (the current one for a table with no file)."""
    p = Path(path).expanduser()
    return str(p if p.is_absolute() else ((base_dir or Path.cwd()) / p).resolve())


def _check_preset(key: str, value: str) -> None:
    try:
        from trainers import preset
    except ImportError:
        return  # no preset registry yet: checked when the study resolves its model
    try:
        preset(value)
    except (ValueError, KeyError) as e:
        raise SpecError(f"model.{key}: {e}") from None


def _relative_defaults(budget: BudgetSection, pruning: PruningSection,
                       d: Mapping[str, Any]) -> tuple[BudgetSection, PruningSection]:
    """Unset intervals follow the budget: a quarter of it between evaluations, and ASHA's grace
    one evaluation, so a spec that only shrinks tokens_per_trial stays valid."""
    if "eval_every_tokens" not in d.get("budget", {}) and isinstance(
            budget.tokens_per_trial, int) and budget.tokens_per_trial > 0:
        budget = dataclasses.replace(
            budget, eval_every_tokens=min(50_000, max(1, budget.tokens_per_trial // 4)))
    if "grace_tokens" not in d.get("pruning", {}):
        pruning = dataclasses.replace(pruning, grace_tokens=budget.eval_every_tokens)
    return budget, pruning


def _resolve_pruning(pruning: PruningSection) -> PruningSection:
    """``auto``: no pruning; ASHA is there to ask for (``scheduler = "asha"``).

    Measured on the search-efficiency replays (benchmarks/RESULTS.md, "Search efficiency"):
    with several objectives ASHA, which ranks by val_loss alone, prunes the fast large-batch
    end of the Pareto front; with val_loss alone GP, the default sampler, still did better
    without it (GP + ASHA: 8/10 seeds reached random search's best and ended at 3.021, against
    10/10 and 2.990 unpruned; TPE + ASHA got there sooner than TPE alone but ended no better,
    3.025 vs 3.021), and no grace or reduction factor tried saved more than 1.9x tokens. The
    resolved choice is what the stored spec shows.
    """
    if pruning.scheduler != "auto":
        return pruning
    return dataclasses.replace(pruning, scheduler="none")


def _check_budget(b: BudgetSection, p: PruningSection) -> None:
    _require(b.tokens_per_trial > 0, "budget.tokens_per_trial", "must be > 0", b.tokens_per_trial)
    _require(0 < b.eval_every_tokens <= b.tokens_per_trial, "budget.eval_every_tokens",
             f"must be in (0, tokens_per_trial={b.tokens_per_trial}]", b.eval_every_tokens)
    _require(p.scheduler in SCHEDULERS, "pruning.scheduler", f"must be one of {SCHEDULERS}",
             p.scheduler)
    if p.scheduler == "none":
        return
    _require(0 < p.grace_tokens <= b.tokens_per_trial, "pruning.grace_tokens",
             f"must be in (0, tokens_per_trial={b.tokens_per_trial}]", p.grace_tokens)
    _require(p.reduction_factor > 1, "pruning.reduction_factor", "must be > 1",
             p.reduction_factor)


def _check_data(data: DataSection, budget: BudgetSection, space: SearchSpace,
                base_dir: Path | None) -> DataSection:
    """Load the corpus as every trial will, so a corpus or budget no trial could train on is a
    spec error instead of a study of failed trials. The longest seq_len the space can sample
    is the worst case; the batch size cannot fail a trial (the trainer caps each step at the
    tokens left)."""
    if data.corpus != STDLIB_CORPUS:
        data = dataclasses.replace(data, corpus=_absolute(data.corpus, base_dir))
    seq_len = space.largest("seq_len")
    # trainers.train's rule: the budget must hold one whole sequence
    _require(budget.tokens_per_trial >= seq_len, "budget.tokens_per_trial",
             f"must hold at least one sequence of the longest seq_len the space allows "
             f"(seq_len={seq_len})", budget.tokens_per_trial)
    try:
        corpus = load_corpus(data.corpus, vocab_size=data.vocab_size or None)
    except (ValueError, OSError) as e:
        raise SpecError(f"data.corpus: {str(e).removeprefix('corpus: ')}") from None
    # load_corpus ignores vocab_size for "stdlib" but rejects it for a text file; one rule
    # for every corpus: the model's vocabulary is the corpus' own
    _require(data.vocab_size in (0, corpus.vocab_size), "data.vocab_size",
             f"must be 0 or the corpus' own vocabulary ({corpus.vocab_size} for "
             f"{data.corpus!r})", data.vocab_size)
    try:
        corpus.check_fits(seq_len)
    except ValueError as e:
        raise SpecError(f"data.corpus: {e}") from None
    return data


def _check_resources(r: ResourcesSection) -> None:
    _require(r.cpus_per_trial > 0, "resources.cpus_per_trial", "must be > 0", r.cpus_per_trial)
    _require(r.gpus_per_trial >= 0, "resources.gpus_per_trial", "must be >= 0", r.gpus_per_trial)


def _objectives(table: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    _require(len(table) > 0, "objectives", "must name at least one metric", dict(table))
    for name, direction in table.items():
        _require(name in METRICS, f"objectives.{name}", f"must be a metric in {sorted(METRICS)}",
                 name)
        _require(direction in DIRECTIONS, f"objectives.{name}", f"must be one of {DIRECTIONS}",
                 direction)
    return tuple(table.items())


def _constraints(table: Mapping[str, Any]) -> tuple[tuple[str, float], ...]:
    out = []
    for key, limit in table.items():
        try:
            constraint_target(key)
        except ValueError as e:
            raise SpecError(str(e)) from None
        ok = isinstance(limit, (int, float)) and not isinstance(limit, bool)
        _require(ok and math.isfinite(limit), f"constraints.{key}", "must be a finite number",
                 limit)
        out.append((key, float(limit)))
    return tuple(out)


def _space(table: Any, base_dir: Path | None) -> SearchSpace:
    _require(isinstance(table, Mapping), "space",
             'is required: [space] file = "deepseek_v3.toml", or inline [space.params.*]', table)
    try:
        if "file" in table:
            rest = sorted(set(table) - {"file"})
            _require(not rest, "space", "must set either file or inline params/fixed, not both",
                     rest)
            _require(isinstance(table["file"], str), "space.file", "must be a string",
                     table["file"])
            return load_space(table["file"], base_dir=base_dir)
        return space_from_dict(table, where="space")
    except SpaceError as e:
        raise SpecError(str(e)) from None


def _reject_unknown(table: Mapping[str, Any], valid: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(table) - set(valid))
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {unknown}; valid keys are {sorted(valid)}.")


def _require(cond: bool, where: str, rule: str, value: Any) -> None:
    if not cond:
        raise SpecError(f"{where}: {rule}, but got {value!r}.")
