"""StudySpec: a tuning study as declared in TOML, validated into frozen dataclasses.

Two steps. `parse_spec` is pure: it checks every rule that needs no file (types, ranges, names,
the metric table) and resolves relative paths against the spec file's folder, storing them
absolute so Ray workers (in their own trial folders) and a later ``resume`` from any folder see
the same files. `check_inputs` then does the checks that read files: the model config loads, the
corpus loads and holds a sequence. `load_spec` (``submit``) runs both; a stored spec is only
parsed, and the command that trains from it checks its inputs once.

`parse_spec` is thin: each section is its module's (`sections`: ``[study]``, ``[budget]``,
``[pruning]``, ``[resources]``; `model_spec`: ``[model]``, ``[full_run]``; `data_spec`:
``[data]``; `start_spec`, `ladder_spec`, `law_spec`: ``[start]``, ``[ladder]``, ``[law]`` and
what a law needs of the rest), the table reading and the error type `table`'s; here are the
``[objectives]``, ``[constraints]`` and ``[space]`` tables and the rules across sections. The
names callers import from this module (the sections, `SpecError`, `read_toml`, `NAME_RE`, ...)
are re-exported (`__all__`).

Every error names the field, the rule and the value; unknown keys are rejected with the valid
ones listed. Nothing here writes to disk, so the CLI can validate first and write nothing on bad
input.

    >>> spec = load_spec("search_spaces/quickstart.toml")  # doctest: +SKIP
    >>> spec.study.n_trials
    12
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from search_spaces.loader import SearchSpace, SpaceError, load_space, space_from_dict
from trainers.config.validation import FieldError, reject_unknown, relabel, require
from tuner.study.specs.data_spec import (
    STDLIB_CORPUS,
    DataSection,
    check_corpus,
    data_vocab_size,
    parse_data,
)
from tuner.study.specs.ladder_spec import LadderError, LadderSection, parse_ladder
from tuner.study.specs.law_spec import LawSection, law_of_spec, law_space, with_batches
from tuner.study.specs.metrics import DIRECTIONS, METRICS, Direction, constraint_target
from tuner.study.specs.model_spec import (
    FullRunSection,
    ModelSection,
    check_config_file,
    check_modeled_metrics,
    parse_full_run,
    parse_model,
)
from tuner.study.specs.sections import (
    NAME_RE,
    BudgetSection,
    PruningSection,
    ResourcesSection,
    StudySection,
    parse_budget_and_pruning,
    resolve_pruning,
)
from tuner.study.specs.start_spec import StartError, StartSection, parse_start
from tuner.study.specs.table import (
    MAX_KEY_PARTS,
    SpecError,
    first_line,
    read_toml,
    section,
)
from tuner.study.specs.urls import shown

__all__ = ["MAX_KEY_PARTS", "NAME_RE", "SECTIONS", "STDLIB_CORPUS", "BudgetSection",
           "DataSection", "FullRunSection", "ModelSection", "PruningSection", "ResourcesSection",
           "SpecError", "StudySection", "StudySpec", "check_inputs", "data_vocab_size",
           "load_spec", "parse_spec", "read_toml", "spec_from_dict", "with_batches"]

SECTIONS = ("study", "model", "data", "budget", "objectives", "constraints", "pruning",
            "resources", "full_run", "space", "start", "ladder", "law")


@dataclass(frozen=True, kw_only=True)
class StudySpec:
    """A validated study. ``objectives`` and ``constraints`` keep the spec's order."""

    study: StudySection
    model: ModelSection
    data: DataSection
    budget: BudgetSection
    objectives: tuple[tuple[str, Direction], ...]
    constraints: tuple[tuple[str, float], ...]
    pruning: PruningSection
    resources: ResourcesSection
    space: SearchSpace
    full_run: FullRunSection = FullRunSection()
    # evaluated or learnt from first: baselines, enqueued points, a warm start (start_spec)
    start: StartSection = StartSection()
    # the widths this study climbs, and which rung it is (ladder_spec)
    ladder: LadderSection = LadderSection()
    # the token budgets whose optima fit the lr and batch laws, and which one this is (law_spec)
    law: LawSection = LawSection()

    @property
    def name(self) -> str:
        return self.study.name

    @property
    def kind(self) -> str:
        """What this spec runs: ``"law"`` (a whole law: its every budget, from the smallest),
        ``"ladder"`` (a whole ladder: its every rung, from the bottom) or ``"study"`` (one
        study: a plain one, or one budget of a law or one rung of a ladder). The one place this
        is decided; the command line and the service's driver both ask it."""
        if self.law.on and self.law.budget == 0:
            return "law"
        if self.ladder.on and self.ladder.rung == 0:
            return "ladder"
        return "study"

    def to_dict(self) -> dict[str, Any]:
        """TOML-shaped dict with the space inline, so a stored spec needs no other file.

        A password in ``study.storage`` is masked: the dict is what gets stored and written, and
        a secret stays in memory. The study is found again through ``--storage`` anyway."""
        return {
            "study": dataclasses.asdict(self.study) | {"storage": shown(self.study.storage)},
            "model": {k: v for k, v in dataclasses.asdict(self.model).items() if v},
            "data": dataclasses.asdict(self.data),
            "budget": dataclasses.asdict(self.budget),
            "objectives": dict(self.objectives),
            "constraints": dict(self.constraints),
            "pruning": dataclasses.asdict(self.pruning),
            "resources": dataclasses.asdict(self.resources),
            "full_run": {k: v for k, v in dataclasses.asdict(self.full_run).items() if v},
            "space": self.space.to_dict(),
        } | ({"start": self.start.to_dict()} if self.start.to_dict() else {}) \
          | ({"ladder": self.ladder.to_dict()} if self.ladder.on else {}) \
          | ({"law": self.law.to_dict()} if self.law.on else {})

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, base_dir: Path | None = None) -> StudySpec:
        """A stored spec (`to_dict`), parsed (`parse_spec`): its files were checked when it
        was submitted, and the command that trains from it checks them again
        (`check_inputs`)."""
        return parse_spec(d, base_dir=base_dir)

    @property
    def full_run_target(self) -> str:
        """The full run's model: ``[full_run] target``, else ``[model] full`` ("" if neither)."""
        return self.full_run.target or self.model.full


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
        raise SpecError(f"spec: must be an existing file, but got {str(path)!r}.", "spec")
    try:
        text = path.read_text()
    except UnicodeDecodeError as e:
        raise SpecError(f"{path}: not valid TOML ({first_line(e)}).", "spec") from None
    table = read_toml(text, "spec", origin=str(path))
    for dotted, value in (overrides or {}).items():
        section, key = dotted.split(".", 1)
        table.setdefault(section, {})[key] = value
    return spec_from_dict(table, base_dir=path.resolve().parent)


def spec_from_dict(d: Mapping[str, Any], *, base_dir: Path | None = None) -> StudySpec:
    """Validate a spec table in full: `parse_spec`, then `check_inputs`."""
    spec = parse_spec(d, base_dir=base_dir)
    check_inputs(spec)
    return spec


def parse_spec(d: Mapping[str, Any], *, base_dir: Path | None = None) -> StudySpec:
    """Validate a spec table without reading any file but a ``[space] file`` (module docstring).

    Raises:
        SpecError: the first rule broken.
    """
    reject_unknown(d, SECTIONS, "spec", error=SpecError)
    for key in SECTIONS:
        require(isinstance(d.get(key, {}), Mapping), key, "must be a table", d.get(key),
                error=SpecError)
    require("study" in d, "study", "is required (at least [study] name = ...)", None,
            error=SpecError)
    study = section(StudySection, d["study"], "study")  # checks itself (__post_init__)
    model = parse_model(d.get("model", {}), base_dir)
    data = parse_data(d.get("data", {}), base_dir)
    budget, pruning = parse_budget_and_pruning(d.get("budget", {}), d.get("pruning", {}))
    resources = section(ResourcesSection, d.get("resources", {}), "resources")  # checks itself
    objectives = _objectives(d.get("objectives", {"val_loss": "minimize"}))
    pruning = resolve_pruning(pruning)
    constraints = _constraints(d.get("constraints", {}))
    full_run = parse_full_run(d.get("full_run", {}), base_dir)
    check_modeled_metrics(model, full_run, objectives, constraints)
    space = _space(d.get("space"), base_dir)
    # trainers.train's rule: the budget must hold one whole sequence
    seq_len = space.largest("seq_len")
    require(budget.tokens_per_trial >= seq_len, "budget.tokens_per_trial",
            f"must hold at least one sequence of the longest seq_len the space allows "
            f"(seq_len={seq_len})", budget.tokens_per_trial, error=SpecError)
    try:
        start = parse_start(d.get("start", {}), space, study_name=study.name,
                            n_trials=study.n_trials, name_re=NAME_RE)
    except StartError as e:
        raise relabel(e, e.field, error=SpecError) from None
    try:
        ladder = parse_ladder(d.get("ladder", {}), study_name=study.name, name_re=NAME_RE)
    except LadderError as e:
        raise relabel(e, e.field, error=SpecError) from None
    law = law_of_spec(d.get("law", {}), study.name, ladder, space, objectives)
    space = law_space(law, space, study)
    return StudySpec(study=study, model=model, data=data, budget=budget, objectives=objectives,
                     constraints=constraints, pruning=pruning, resources=resources, space=space,
                     full_run=full_run, start=start, ladder=ladder, law=law)


def check_inputs(spec: StudySpec) -> None:
    """The checks that read files: ``[model] full`` and ``[full_run] target`` load as DeepSeek
    configs, and the corpus loads as every trial will load it, matches ``data.vocab_size`` and
    holds the longest sequence the space allows (so a corpus no trial could train on is a spec
    error, not a study of failed trials).

    Raises:
        SpecError: naming the field, the rule and the value.
    """
    if spec.model.full:
        check_config_file("model.full", spec.model.full)
    if spec.full_run.target.endswith(".json"):
        check_config_file("full_run.target", spec.full_run.target)
    check_corpus(spec.data, spec.space.largest("seq_len"))


def _objectives(table: Mapping[str, Any]) -> tuple[tuple[str, Direction], ...]:
    require(len(table) > 0, "objectives", "must name at least one metric", dict(table),
            error=SpecError)
    for name, direction in table.items():
        require(name in METRICS, f"objectives.{name}", f"must be a metric in {sorted(METRICS)}",
                name, error=SpecError)
        require(direction in DIRECTIONS, f"objectives.{name}", f"must be one of {DIRECTIONS}",
                direction, error=SpecError)
    return tuple(table.items())


def _constraints(table: Mapping[str, Any]) -> tuple[tuple[str, float], ...]:
    out = []
    for key, limit in table.items():
        try:
            constraint_target(key)
        except FieldError as e:
            raise relabel(e, e.field, error=SpecError) from None
        ok = isinstance(limit, (int, float)) and not isinstance(limit, bool)
        require(ok and math.isfinite(limit), f"constraints.{key}", "must be a finite number",
                limit, error=SpecError)
        out.append((key, float(limit)))
    return tuple(out)


def _space(table: Any, base_dir: Path | None) -> SearchSpace:
    require(isinstance(table, Mapping), "space",
            'is required: [space] file = "deepseek_v3.toml", or inline [space.params.*]', table,
            error=SpecError)
    try:
        if "file" in table:
            rest = sorted(set(table) - {"file"})
            require(not rest, "space", "must set either file or inline params/fixed, not both",
                    rest, error=SpecError)
            require(isinstance(table["file"], str), "space.file", "must be a string",
                    table["file"], error=SpecError)
            return load_space(table["file"], base_dir=base_dir)
        return space_from_dict(table, where="space")
    except SpaceError as e:
        raise relabel(e, e.field, error=SpecError) from None
