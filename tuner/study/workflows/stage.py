"""A stage of a run: one ordinary study among the several a law (its budgets) or a ladder (its
rungs) runs in one storage, as the kinds yield them to `stage_runner.run_stages`."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from tuner.study.specs.spec import StudySpec


@dataclass(frozen=True)
class Stage:
    """One stage: its index (0 runs in the run's own folder), its spec, and whether its study
    exists already (then it is resumed)."""

    index: int
    spec: StudySpec
    exists: bool


Stages = Generator[Stage, Any, None]  # sent each finished stage's StudySummary
