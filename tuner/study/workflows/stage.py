"""A stage of a run: one ordinary study among the several a law (its budgets) or a ladder (its
rungs) runs in one storage, as the kinds yield them to `stage_runner.run_stages`."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from tuner.study.run.preflight import Found
from tuner.study.specs.spec import StudySpec


@dataclass(frozen=True)
class Stage:
    """One stage: its index (0 runs in the run's own folder), its spec, whether its study
    exists already (then it is resumed) and, if the kind loaded that study to decide its spec,
    the study as loaded (its preflight then loads and parses it no second time)."""

    index: int
    spec: StudySpec
    exists: bool
    found: Found | None = None


Stages = Generator[Stage, Any, None]  # sent each finished stage's StudySummary
