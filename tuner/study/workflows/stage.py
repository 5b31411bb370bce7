"""A stage of a run: one ordinary study among the several a law (its budgets) or a ladder (its
rungs) runs in one storage, as the kinds yield them to `stage_runner.run_stages`; and the rule
that a stage runs only in a study its own law or ladder made (`check_owned`), asked when each
stage starts."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import optuna

from tuner.study.run.preflight import Found
from tuner.study.specs.spec import StudySpec
from tuner.study.store import records
from tuner.study.store import storage as st


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


class StageTaken(FileExistsError):
    """A stage's study exists but its law or ladder did not make it (another user's study of
    that name, or one left by something else): the stage does not run in it."""


def check_owned(study: optuna.Study, base: str) -> None:
    """Refuse to run a stage of the law or ladder ``base`` in ``study`` unless ``base`` made
    it (`records.STAGE_OF`). A study from before that mark counts as made by ``base`` when no
    service submitted it on its own and its stored spec names ``base`` as its law or ladder.

    Raises:
        StageTaken: another made it; a law would read its trials as one of its budgets (their
            lr outside its own range), a ladder would fight its driver for the lease.
    """
    attrs = study.user_attrs
    made_by = attrs.get(records.STAGE_OF)
    if made_by is None and records.SERVICE not in attrs and records.SPEC in attrs:
        made_by = st.stage_base(st.stored_spec(study))
    if made_by != base:
        raise StageTaken(f"study.name: a stage of {base!r} must be a study {base!r} made, but "
                         f"{study.study_name!r} exists and was not made by it; delete that "
                         f"study or give the law or ladder another name.")
