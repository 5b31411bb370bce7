"""StudySpec: a tuning study as declared in TOML, validated into frozen dataclasses.

Two steps. `parse_spec` is pure: it checks every rule that needs no file (types, ranges, names,
the metric table) and resolves relative paths against the spec file's folder, storing them
absolute so Ray workers (in their own trial folders) and a later ``resume`` from any folder see
the same files. `check_inputs` then does the checks that read files: the model config loads, the
corpus loads and holds a sequence. `load_spec` (``submit``) runs both; a stored spec is only
parsed, and the command that trains from it checks its inputs once.

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
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import optuna

from search_spaces.loader import SearchSpace, SpaceError, load_space, space_from_dict
from trainers.blend import parse_blend
from trainers.config.model_args import GROUP_SCORES, ModelArgs
from trainers.config.validation import FieldError, reject_unknown, relabel, require
from trainers.presets import preset
from tuner.corpus.documents import CorpusError
from tuner.corpus.tokenizer import bpe_size, load_tokenizer, vocab_size
from tuner.modeling.full_run import FullRunLimits, check_target
from tuner.modeling.hardware import HARDWARE
from tuner.study.specs.ladder_spec import LadderError, LadderSection, parse_ladder
from tuner.study.specs.law_spec import LawError, LawSection, parse_law
from tuner.study.specs.metrics import (
    DIRECTIONS,
    METRICS,
    Direction,
    constraint_target,
)
from tuner.study.specs.sampler_registry import AUTO, missing_modules, sampler_names
from tuner.study.specs.start_spec import StartError, StartSection, parse_start
from tuner.study.specs.urls import URL_PREFIXES, shown

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

SCHEDULERS = ("auto", "asha", "none")
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # used with fullmatch: no "\n" at the end
STDLIB_CORPUS = "stdlib"  # load_corpus's name for the built-in corpus, not a path
SECTIONS = ("study", "model", "data", "budget", "objectives", "constraints", "pruning",
            "resources", "full_run", "space", "start", "ladder", "law")


class SpecError(FieldError):
    """A study spec breaks a rule; ``field`` names the key (``study.name``), the message the
    rule and the value."""


@dataclass(frozen=True, kw_only=True)
class StudySection:
    name: str
    n_trials: int = 12
    max_concurrent: int = 2
    seed: int = 0
    sampler: str = "auto"
    # random trials before TPE/GP model the results; "auto" =
    # tuner.study.trial.samplers.startup_trials
    startup_trials: int | str = "auto"
    storage: str = ""  # "" = sqlite file in the study's run folder
    # val_loss noise: re-train the noise_top best feasible trials with this many other seeds
    # once the study is done (tuner.study.results.noise; not counted in n_trials); 0 = not measured
    noise_repeats: int = 0
    noise_top: int = 2

    def __post_init__(self) -> None:
        """The section checks itself (as `trainers.config.recipe.Recipe` does), wherever it is
        built:
        a parsed spec, a stored one, a law's budget or a ladder's rung."""
        def rule(ok: bool, key: str, text: str, value: object) -> None:
            require(ok, f"study.{key}", text, value, error=SpecError)

        rule(bool(NAME_RE.fullmatch(self.name)), "name",
             "must be 1-64 characters of letters, digits, '_', '-', '.' (a folder name)",
             self.name)
        rule(self.n_trials >= 1, "n_trials", "must be >= 1", self.n_trials)
        rule(self.max_concurrent >= 1, "max_concurrent", "must be >= 1", self.max_concurrent)
        # the samplers seed numpy's legacy generator, which takes 32 bits
        rule(0 <= self.seed < 2**32, "seed", "must be an integer in [0, 2**32)", self.seed)
        rule(self.sampler in sampler_names(), "sampler", f"must be one of {sampler_names()}",
             self.sampler)
        rule(self.noise_repeats >= 0, "noise_repeats", "must be >= 0 (0 = noise not measured)",
             self.noise_repeats)
        rule(self.noise_top >= 1, "noise_top", "must be >= 1", self.noise_top)
        rule(self.startup_trials == "auto" or (isinstance(self.startup_trials, int)
                                               and self.startup_trials >= 1),
             "startup_trials", "must be an integer >= 1 or \"auto\"", self.startup_trials)
        missing = missing_modules(self.sampler) if self.sampler != AUTO else []
        rule(not missing, "sampler", f"{self.sampler!r} needs {', '.join(missing)} installed "
             f"(pip install {' '.join(missing)})", self.sampler)
        if self.storage:
            rule(self.storage.startswith(URL_PREFIXES), "storage",
                 "must be '' (a sqlite file in the run folder) or a database URL "
                 "(sqlite:///…, postgresql://…)", self.storage)


@dataclass(frozen=True, kw_only=True)
class ModelSection:
    """Exactly one way to name the proxy: a preset, or a full config (+ the proxy preset size)."""

    preset: str = ""
    full: str = ""  # an absolute path, once parsed (`_model` reads it from the spec's folder)
    proxy: str = ""
    # how routing scores a group (trainers.config.model_args.GROUP_SCORES)
    group_score: str = "auto"

    def __post_init__(self) -> None:
        """Checks its own values, as `StudySection` does (``debug`` when neither is named is
        `_model`'s default, and the config file's reading `check_inputs`')."""
        given = [k for k in ("preset", "full") if getattr(self, k)]
        require(len(given) == 1, "model", "must set exactly one of preset or full", given,
                error=SpecError)
        if self.proxy:
            require(bool(self.full), "model.proxy", "is only valid with model.full", self.proxy,
                    error=SpecError)
        for key in ("preset", "proxy"):
            if getattr(self, key):
                _check_preset_value(f"model.{key}", getattr(self, key))
        require(self.group_score in GROUP_SCORES, "model.group_score",
                f"must be one of {list(GROUP_SCORES)}", self.group_score, error=SpecError)


@dataclass(frozen=True, kw_only=True)
class DataSection:
    corpus: str = STDLIB_CORPUS  # or an absolute path, once validated
    vocab_size: int = 0  # 0 = the corpus' own; else must equal it (256 for byte corpora)
    # a larger corpus is refused before any trial runs (every worker maps it)
    max_corpus_gb: float = 8.0
    # "" = none; a tokenizer.json path, or "bpe:N" (N tokens trained on the corpus): text is
    # tokenized once per machine into a cached Megatron dataset (tuner.corpus)
    tokenizer: str = ""
    text_field: str = "text"  # the field of a .jsonl line / the column of a .parquet file
    eod_token: str = ""  # "" = the tokenizer's end-of-document token, found by its name

    def __post_init__(self) -> None:
        """Checks its own values, as `StudySection` does; the paths are `_data`'s (they are
        read from the spec's folder) and the files `check_inputs`'."""
        require(isinstance(self.vocab_size, int) and self.vocab_size >= 0, "data.vocab_size",
                "must be an integer >= 0 (0 = the corpus' own)", self.vocab_size,
                error=SpecError)
        require(self.max_corpus_gb > 0, "data.max_corpus_gb", "must be > 0 (GB)",
                self.max_corpus_gb, error=SpecError)
        require(bool(self.text_field), "data.text_field", "must not be empty", self.text_field,
                error=SpecError)


@dataclass(frozen=True, kw_only=True)
class BudgetSection:
    tokens_per_trial: int = 200_000
    # unset in a spec: a quarter of the budget, at most 50,000 (`_budget_and_pruning`)
    eval_every_tokens: int = 50_000

    def __post_init__(self) -> None:
        """Checks its own values, as `StudySection` does."""
        require(self.tokens_per_trial > 0, "budget.tokens_per_trial", "must be > 0",
                self.tokens_per_trial, error=SpecError)
        require(0 < self.eval_every_tokens <= self.tokens_per_trial, "budget.eval_every_tokens",
                f"must be in (0, tokens_per_trial={self.tokens_per_trial}]",
                self.eval_every_tokens, error=SpecError)


@dataclass(frozen=True, kw_only=True)
class PruningSection:
    scheduler: str = "auto"
    grace_tokens: int = 50_000  # unset in a spec: one evaluation interval
    reduction_factor: float = 3.0

    def __post_init__(self) -> None:
        """Checks its own values, as `StudySection` does; the grace against the budget is a
        rule across sections (`_budget_and_pruning`)."""
        require(self.scheduler in SCHEDULERS, "pruning.scheduler",
                f"must be one of {SCHEDULERS}", self.scheduler, error=SpecError)
        if self.scheduler == "none":
            return
        require(self.grace_tokens > 0, "pruning.grace_tokens", "must be > 0",
                self.grace_tokens, error=SpecError)
        require(self.reduction_factor > 1, "pruning.reduction_factor", "must be > 1",
                self.reduction_factor, error=SpecError)


MIN_CPUS_PER_TRIAL = 0.01  # Ray's resource quantum is 1e-4; 1% of a core is the least share
MAX_TRIAL_TIMEOUT_S = 30 * 24 * 3600.0


@dataclass(frozen=True, kw_only=True)
class ResourcesSection:
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    # wall-clock seconds one trial may run; a trial past it is ended and recorded infeasible
    # (reason "timeout"). An hour: 10-100x a proxy trial of the shipped presets on a CPU.
    trial_timeout_s: float = 3600.0

    def __post_init__(self) -> None:
        """Checks itself, as `StudySection` does: Ray schedules resources in steps of 1e-4, so
        a share below `MIN_CPUS_PER_TRIAL` is no share; a timeout past `MAX_TRIAL_TIMEOUT_S`
        is none."""
        for key, ok, text in (
                ("cpus_per_trial", MIN_CPUS_PER_TRIAL <= self.cpus_per_trial < math.inf,
                 f"must be a finite number >= {MIN_CPUS_PER_TRIAL}"),
                ("gpus_per_trial", 0 <= self.gpus_per_trial < math.inf,
                 "must be a finite number >= 0"),
                ("trial_timeout_s", 0 < self.trial_timeout_s <= MAX_TRIAL_TIMEOUT_S,
                 f"must be > 0 and <= {MAX_TRIAL_TIMEOUT_S:.0f} seconds (30 days)")):
            require(ok, f"resources.{key}", text, getattr(self, key), error=SpecError)


@dataclass(frozen=True, kw_only=True)
class FullRunSection:
    """The full run the study's recipe is for: what the modeled ``full_*`` metrics cost and
    ``moetune export`` defaults to. ``target`` is a published config's name
    (`tuner.modeling.targets.TARGETS`, e.g. ``deepseek-v3-671b``), a DeepSeek config JSON or a
    preset name; empty means ``[model] full``. The defaults are DeepSeek-V3's pre-training run
    (technical report, arXiv:2412.19437: 14.8T tokens, 4K sequences, 2048 H800 GPUs)."""

    target: str = ""
    hardware: str = "h800"
    gpus: int = 2048
    tokens: int = 14_800_000_000_000
    seq_len: int = 4096

    def __post_init__(self) -> None:
        """The full run's limits are `FullRunLimits`' (those of ``moetune export`` too), the
        target's name rule `check_target`'s; a config JSON is read by `check_inputs`."""
        require(self.hardware in HARDWARE, "full_run.hardware",
                f"must be one of {sorted(HARDWARE)}", self.hardware, error=SpecError)
        try:
            FullRunLimits(gpus=self.gpus, tokens=self.tokens, seq_len=self.seq_len)
            if self.target:
                check_target(self.target)
        except FieldError as e:
            raise relabel(e, f"full_run.{e.field}", error=SpecError) from None


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
        raise SpecError(f"{path}: not valid TOML ({_first_line(e)}).", "spec") from None
    table = read_toml(text, "spec", origin=str(path))
    for dotted, value in (overrides or {}).items():
        section, key = dotted.split(".", 1)
        table.setdefault(section, {})[key] = value
    return spec_from_dict(table, base_dir=path.resolve().parent)


MAX_KEY_PARTS = 64  # dotted parts of one TOML key (`read_toml`)


def read_toml(text: str, field: str, *, origin: str | None = None,
              max_bytes: int | None = None) -> dict[str, Any]:
    """``text`` parsed as TOML, for a spec file and a submitted spec alike; ``field`` is what
    an error names, ``origin`` what its message calls the text (default: the field).

    Raises:
        SpecError: over ``max_bytes``, not UTF-8, a key of too many parts, or not TOML.
    """
    origin = origin or field
    try:
        size = len(text.encode())
    except UnicodeEncodeError:  # a lone surrogate, sent as a JSON escape
        raise SpecError(f"{origin}: must be UTF-8 text, but holds a character that is not "
                        "(a lone surrogate).", field) from None
    if max_bytes is not None and size > max_bytes:
        raise SpecError(f"{origin}: must be at most {max_bytes} bytes, but got {size}.", field)
    for number, line in enumerate(text.splitlines(), 1):
        # tomllib's time grows with the square of a dotted key's parts (a 26 KB key: 3 s of
        # CPU); no spec needs more than a few, so a long one is refused before parsing
        head = line.split("=", 1)[0]
        if head.count(".") >= MAX_KEY_PARTS:
            raise SpecError(f"{origin}: a key must have fewer than {MAX_KEY_PARTS} dotted "
                            f"parts, but line {number} has {head.count('.') + 1}.", field)
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise SpecError(f"{origin}: not valid TOML (arrays or tables nested too deep for the "
                        "parser).", field) from None
    except ValueError as e:  # TOMLDecodeError; an int of > 4300 digits
        raise SpecError(f"{origin}: not valid TOML ({_first_line(e)}).", field) from None


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:200]


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
    study = _section(StudySection, d["study"], "study")  # checks itself (__post_init__)
    model = _model(d.get("model", {}), base_dir)
    data = _data(d.get("data", {}), base_dir)
    budget, pruning = _budget_and_pruning(d.get("budget", {}), d.get("pruning", {}))
    resources = _section(ResourcesSection, d.get("resources", {}), "resources")  # checks itself
    objectives = _objectives(d.get("objectives", {"val_loss": "minimize"}))
    pruning = _resolve_pruning(pruning)
    constraints = _constraints(d.get("constraints", {}))
    full_run = _full_run(d.get("full_run", {}), base_dir)
    _check_modeled_metrics(model, full_run, objectives, constraints)
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
    law = _law(d.get("law", {}), study.name, ladder, space, objectives)
    space = _law_space(law, space, study)
    return StudySpec(study=study, model=model, data=data, budget=budget, objectives=objectives,
                     constraints=constraints, pruning=pruning, resources=resources, space=space,
                     full_run=full_run, start=start, ladder=ladder, law=law)


def _law(table: Any, name: str, ladder: LadderSection, space: SearchSpace,
         objectives: tuple[tuple[str, Direction], ...]) -> LawSection:
    """``[law]``, and what a law needs of the rest of the spec: lr searched, val_loss an
    objective (the surface is fitted to it), no ladder beside it (one study, one kind of
    fidelity)."""
    try:
        law = parse_law(table, study_name=name, name_re=NAME_RE)
    except LawError as e:
        raise relabel(e, e.field, error=SpecError) from None
    if not law.on:
        return law
    require(not ladder.on, "law", "cannot be combined with [ladder] (a law varies the tokens "
            "at one width, a ladder the width at one budget)", sorted(table), error=SpecError)
    require("lr" in space.names(), "law",
            "needs lr searched in [space] (the law fits the optimal lr)", list(space.names()),
            error=SpecError)
    require("val_loss" in dict(objectives), "law",
            "needs val_loss among the objectives (the optimum is val_loss's)", dict(objectives),
            error=SpecError)
    seq_len = space.largest("seq_len")
    require(law.tokens[0] >= seq_len, "law.tokens",
            f"must each hold at least one sequence of the longest seq_len the space allows "
            f"(seq_len={seq_len})", list(law.tokens), error=SpecError)
    return law


def _law_space(law: LawSection, space: SearchSpace, study: StudySection) -> SearchSpace:
    """The space a law with ``batches`` searches: ``batch_end`` a categorical over exactly those
    values, added here unless the space already searches it so (a stored spec does). A space
    that fixes ``batch_end``, searches it otherwise, or searches ``seq_len`` (the batches'
    tokens per step would then move with it) is refused, as is a number of trials per budget
    that the batches do not divide (every cell gets as many)."""
    if not law.batches:
        return space
    choices = list(law.stage_batches)
    require("batch_end" not in space.fixed, "space.fixed.batch_end",
            "must not be set with law.batches (the law searches every batch it lists)",
            space.fixed.get("batch_end"), error=SpecError)
    require("seq_len" not in space.names(), "space.params.seq_len",
            "must not be searched with law.batches (fix it: the batches are sequences of one "
            "length)", "searched", error=SpecError)
    n = law.trials or study.n_trials
    field = "law.trials" if law.trials else "study.n_trials"
    require(law.budget > 0 or n % len(choices) == 0, field,  # a budget's own: derived
            f"must be a multiple of len(law.batches) = {len(choices)}, so every (budget, batch) "
            "cell gets as many trials", n, error=SpecError)
    dists = space.distributions()
    if "batch_end" in dists:
        d = dists["batch_end"]
        same = (isinstance(d, optuna.distributions.CategoricalDistribution)
                and list(d.choices) == choices)
        require(same, "space.params.batch_end",
                f"must be absent with law.batches (the law searches it as categorical "
                f"{choices}) or exactly that",
                list(getattr(d, "choices", ())) or d, error=SpecError)
        return space
    return with_batches(space, choices)


def with_batches(space: SearchSpace, choices: list[int]) -> SearchSpace:
    """``space`` with ``batch_end`` searched as a categorical over ``choices``."""
    source = space.to_dict()
    params = dict(source.get("params", {}))
    params["batch_end"] = {"type": "categorical", "choices": choices}
    return space_from_dict({**source, "params": params})


def check_inputs(spec: StudySpec) -> None:
    """The checks that read files: ``[model] full`` and ``[full_run] target`` load as DeepSeek
    configs, and the corpus loads as every trial will load it, matches ``data.vocab_size`` and
    holds the longest sequence the space allows (so a corpus no trial could train on is a spec
    error, not a study of failed trials).

    Raises:
        SpecError: naming the field, the rule and the value.
    """
    if spec.model.full:
        _check_config_file("model.full", spec.model.full)
    if spec.full_run.target.endswith(".json"):
        _check_config_file("full_run.target", spec.full_run.target)
    _check_corpus(spec.data, spec.space.largest("seq_len"))


_MODELED = ("full_peak_memory_gb", "full_gpu_hours")


def _check_modeled_metrics(model: ModelSection, full_run: FullRunSection, objectives: tuple,
                           constraints: tuple) -> None:
    """full_* metrics model a full run; without a target model there is nothing to model."""
    names = [n for n, _ in objectives] + [constraint_target(k)[0] for k, _ in constraints]
    for name in names:
        if name in _MODELED:
            require(bool(full_run.target or model.full),
                    f"objectives.{name}" if name in dict(objectives) else "constraints",
                    "needs [model] full = a DeepSeek config JSON, or [full_run] target = a "
                    "config JSON or preset (the full run it models)", name, error=SpecError)


def _full_run(table: Mapping[str, Any], base_dir: Path | None) -> FullRunSection:
    table = dict(table)
    tokens = table.get("tokens")
    if isinstance(tokens, float) and math.isfinite(tokens) and tokens.is_integer():
        table["tokens"] = int(tokens)  # TOML reads 14.8e12 as a float
    f = _section(FullRunSection, table, "full_run")  # checks itself (__post_init__)
    if f.target.endswith(".json"):
        return dataclasses.replace(f, target=_absolute(f.target, base_dir))
    return f


_Section = TypeVar("_Section", bound="DataclassInstance")


def _section(cls: type[_Section], table: Mapping[str, Any], where: str) -> _Section:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    reject_unknown(table, tuple(fields), where, error=SpecError)
    kinds: dict[str, type | tuple[type, ...]] = {"str": str, "int": int, "float": float,
                                                 "int | str": (int, str)}
    for key, value in table.items():
        want = kinds[str(fields[key].type)]
        ok = isinstance(value, want) and not isinstance(value, bool)
        if want is float:  # TOML writes 3 for 3.0
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            ok = ok and math.isfinite(value)
        require(ok, f"{where}.{key}", f"must be {_kind(want)}", value, error=SpecError)
    try:
        return cls(**table)
    except TypeError as e:  # a required key missing
        missing = [n for n, f in fields.items()
                   if f.default is dataclasses.MISSING and n not in table]
        key = f"{where}.{missing[0] if missing else '?'}"
        raise SpecError(f"{key}: is required ({e}).", key) from None


def _kind(t: type | tuple[type, ...]) -> str:
    if isinstance(t, tuple):
        return " or ".join(_kind(x) for x in t)
    return {int: "an integer", float: "a finite number", str: "a string"}.get(t, t.__name__)


def _model(table: Mapping[str, Any], base_dir: Path | None) -> ModelSection:
    """``[model]``: the ``debug`` preset when it names neither a preset nor a config, the
    config's path read from the spec's folder; the section checks the rest itself."""
    table = dict(table)
    if table.get("preset", "") == "" and table.get("full", "") == "":  # a wrong type: refused
        table["preset"] = "debug"
    if isinstance(table.get("full"), str) and table["full"]:
        table["full"] = _absolute(table["full"], base_dir)
    return _section(ModelSection, table, "model")


def _check_config_file(where: str, path: str) -> None:
    require(Path(path).is_file(), where, "must be an existing JSON file (a relative path is "
            "read from the spec's folder)", path, error=SpecError)
    try:
        ModelArgs.from_json(path)
    except (ValueError, TypeError, OSError, UnicodeDecodeError) as e:
        raise SpecError(f"{where}: must be a DeepSeek config JSON that ModelArgs accepts ({e}), "
                        f"but got {path!r}.", where) from None


def _absolute(path: str, base_dir: Path | None) -> str:
    """``path`` read from the spec's folder (the current one for a table with no file)."""
    p = Path(path).expanduser()
    return str(p if p.is_absolute() else ((base_dir or Path.cwd()) / p).resolve())


def _check_preset_value(where: str, value: str) -> None:
    try:
        preset(value)
    except (ValueError, KeyError) as e:
        raise SpecError(f"{where}: {e}", where) from None


def _budget_and_pruning(budget: Mapping[str, Any],
                        pruning: Mapping[str, Any]) -> tuple[BudgetSection, PruningSection]:
    """``[budget]`` and ``[pruning]``. Unset intervals follow the budget: a quarter of it
    between evaluations, and ASHA's grace one evaluation, so a spec that only shrinks
    tokens_per_trial stays valid. Each section checks its own values; the grace must fit the
    budget (a rule across the two)."""
    budget, pruning = dict(budget), dict(pruning)
    tokens = budget.get("tokens_per_trial", BudgetSection.tokens_per_trial)
    if ("eval_every_tokens" not in budget and isinstance(tokens, int)
            and not isinstance(tokens, bool) and tokens > 0):
        budget["eval_every_tokens"] = min(50_000, max(1, tokens // 4))
    b = _section(BudgetSection, budget, "budget")
    pruning.setdefault("grace_tokens", b.eval_every_tokens)
    p = _section(PruningSection, pruning, "pruning")
    if p.scheduler != "none":
        require(p.grace_tokens <= b.tokens_per_trial, "pruning.grace_tokens",
                f"must be in (0, tokens_per_trial={b.tokens_per_trial}]", p.grace_tokens,
                error=SpecError)
    return b, p


def _resolve_pruning(pruning: PruningSection) -> PruningSection:
    """``auto``: no pruning; ASHA is there to ask for (``scheduler = "asha"``).

    With several objectives ASHA, which ranks by val_loss alone, prunes the fast large-batch end
    of the Pareto front; with val_loss alone GP, the default sampler, did better without it on
    the search-efficiency replays (figures in benchmarks/RESULTS.md, "Search efficiency"). The
    resolved choice is what the stored spec shows.
    """
    if pruning.scheduler != "auto":
        return pruning
    return dataclasses.replace(pruning, scheduler="none")


def _data(table: Mapping[str, Any], base_dir: Path | None) -> DataSection:
    """``[data]``, its paths absolute (each path of a blend ``"W1 P1 W2 P2"``)."""

    data = _section(DataSection, table, "data")  # checks its own values (__post_init__)
    try:
        bpe = bpe_size(data.tokenizer) if data.tokenizer else None
        blend = parse_blend(data.corpus)
    except CorpusError as e:
        raise SpecError(f"data.{e.field}: {e}", f"data.{e.field}") from None
    except ValueError as e:
        raise SpecError(f"data.corpus: {str(e).removeprefix('corpus: ')}", "data.corpus") from None
    if data.tokenizer and bpe is None:
        data = dataclasses.replace(data, tokenizer=_absolute(data.tokenizer, base_dir))
    if data.corpus == STDLIB_CORPUS:
        return data
    if blend is not None:  # each path absolute; the weights as written
        words = data.corpus.split()
        return dataclasses.replace(data, corpus=" ".join(
            f"{w} {_absolute(p, base_dir)}" for w, p in zip(words[0::2], words[1::2])))
    return dataclasses.replace(data, corpus=_absolute(data.corpus, base_dir))


def load_data(data: DataSection, *, progress: bool = False) -> Any:
    """The corpus ``[data]`` names, as every trial loads it (`tuner.corpus.load`: text with a
    tokenizer is tokenized into the cache the first time on a machine, with a progress bar
    when ``progress``); a `trainers.data.Corpus` or `Blend`.

    Raises:
        SpecError: ``data.<key>: <the file, the rule, the value>``.
    """
    from tuner.corpus.build import load  # torch: only commands that check inputs need it

    try:
        return load(data.corpus, tokenizer=data.tokenizer, text_field=data.text_field,
                    eod_token=data.eod_token, vocab=data.vocab_size,
                    max_bytes=max_corpus_bytes(data), progress=progress)
    except CorpusError as e:
        raise SpecError(f"data.{e.field}: {str(e).removeprefix('corpus: ')}",
                        f"data.{e.field}") from None
    except (ValueError, OSError) as e:
        raise SpecError(f"data.corpus: {str(e).removeprefix('corpus: ')}", "data.corpus") from None


def data_vocab_size(data: DataSection) -> int:
    """The proxy's vocabulary that ``[data]`` states: ``vocab_size``, else the tokenizer's
    (N of ``bpe:N``; a tokenizer.json's largest id + 1), else 0 (the preset's own)."""

    if data.vocab_size or not data.tokenizer:
        return data.vocab_size
    bpe = bpe_size(data.tokenizer)
    if bpe is not None:
        return bpe

    return vocab_size(load_tokenizer(data.tokenizer))


def _check_corpus(data: DataSection, seq_len: int) -> None:
    corpus = load_data(data, progress=True)
    # load_corpus ignores vocab_size for "stdlib" but rejects it for a text file; one rule
    # for every corpus: the model's vocabulary is the corpus' own
    require(data.vocab_size in (0, corpus.vocab_size), "data.vocab_size",
            f"must be 0 or the corpus' own vocabulary ({corpus.vocab_size} for "
            f"{data.corpus!r})", data.vocab_size, error=SpecError)
    try:
        corpus.check_fits(seq_len)
    except ValueError as e:
        raise SpecError(f"data.corpus: {e}", "data.corpus") from None


def max_corpus_bytes(data: DataSection) -> int:
    """``data.max_corpus_gb`` in bytes (GB = 10**9 bytes)."""
    return int(data.max_corpus_gb * 1e9)


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
