"""``[model]`` (the proxy: a preset, or a DeepSeek config and the preset size it shrinks to)
and ``[full_run]`` (the run the recipe is for): their sections, their paths read from the
spec's folder, the config files' check (`check_config_file`, run by `check_inputs`) and the rule
that a modeled metric needs a full run to model.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainers.config.model_args import GROUP_SCORES, ModelArgs
from trainers.config.validation import FieldError, relabel, require
from trainers.presets import preset
from tuner.modeling.full_run import FullRunLimits, check_target
from tuner.modeling.hardware import HARDWARE
from tuner.study.specs.metrics import constraint_target
from tuner.study.specs.table import SpecError, absolute, section


@dataclass(frozen=True, kw_only=True)
class ModelSection:
    """Exactly one way to name the proxy: a preset, or a full config (+ the proxy preset size)."""

    preset: str = ""
    full: str = ""  # an absolute path, once parsed (`parse_model` reads it from the spec's folder)
    proxy: str = ""
    # how routing scores a group (trainers.config.model_args.GROUP_SCORES)
    group_score: str = "auto"

    def __post_init__(self) -> None:
        """Checks its own values, as `StudySection` does (``debug`` when neither is named is
        `parse_model`'s default, and the config file's reading `check_inputs`')."""
        given = [k for k in ("preset", "full") if getattr(self, k)]
        require(len(given) == 1, "model", "must set exactly one of preset or full", given,
                error=SpecError)
        if self.proxy:
            require(bool(self.full), "model.proxy", "is only valid with model.full", self.proxy,
                    error=SpecError)
        for key in ("preset", "proxy"):
            if getattr(self, key):
                check_preset_value(f"model.{key}", getattr(self, key))
        require(self.group_score in GROUP_SCORES, "model.group_score",
                f"must be one of {list(GROUP_SCORES)}", self.group_score, error=SpecError)


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


def parse_model(table: Mapping[str, Any], base_dir: Path | None) -> ModelSection:
    """``[model]``: the ``debug`` preset when it names neither a preset nor a config, the
    config's path read from the spec's folder; the section checks the rest itself."""
    table = dict(table)
    if table.get("preset", "") == "" and table.get("full", "") == "":  # a wrong type: refused
        table["preset"] = "debug"
    if isinstance(table.get("full"), str) and table["full"]:
        table["full"] = absolute(table["full"], base_dir)
    return section(ModelSection, table, "model")


def parse_full_run(table: Mapping[str, Any], base_dir: Path | None) -> FullRunSection:
    table = dict(table)
    tokens = table.get("tokens")
    if isinstance(tokens, float) and math.isfinite(tokens) and tokens.is_integer():
        table["tokens"] = int(tokens)  # TOML reads 14.8e12 as a float
    f = section(FullRunSection, table, "full_run")  # checks itself (__post_init__)
    if f.target.endswith(".json"):
        return dataclasses.replace(f, target=absolute(f.target, base_dir))
    return f


_MODELED = ("full_peak_memory_gb", "full_gpu_hours")


def check_modeled_metrics(model: ModelSection, full_run: FullRunSection, objectives: tuple,
                           constraints: tuple) -> None:
    """full_* metrics model a full run; without a target model there is nothing to model."""
    names = [n for n, _ in objectives] + [constraint_target(k)[0] for k, _ in constraints]
    for name in names:
        if name in _MODELED:
            require(bool(full_run.target or model.full),
                    f"objectives.{name}" if name in dict(objectives) else "constraints",
                    "needs [model] full = a DeepSeek config JSON, or [full_run] target = a "
                    "config JSON or preset (the full run it models)", name, error=SpecError)


def check_config_file(where: str, path: str) -> None:
    require(Path(path).is_file(), where, "must be an existing JSON file (a relative path is "
            "read from the spec's folder)", path, error=SpecError)
    try:
        ModelArgs.from_json(path)
    except (ValueError, TypeError, OSError, UnicodeDecodeError) as e:
        raise SpecError(f"{where}: must be a DeepSeek config JSON that ModelArgs accepts ({e}), "
                        f"but got {path!r}.", where) from None


def check_preset_value(where: str, value: str) -> None:
    try:
        preset(value)
    except (ValueError, KeyError) as e:
        raise SpecError(f"{where}: {e}", where) from None
