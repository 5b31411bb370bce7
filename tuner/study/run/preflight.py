"""Everything a run checks before its first trial, done once: the preflight.

`prepare` takes a parsed spec (or, for ``moetune resume`` and the service's driver, a study's
stored one) and returns a `Plan`: the storage URL, the existing study and its one storage
handle, the resume rules checked, the proxy's model args, the start points and the warm-start
source resolved, and the warnings a user should read. `tuner.study.run.runner.run` then runs
the plan. The CLI's submit and resume, the ladder's and the law's stages and the service's
driver all go through here, so each check has one home.
"""

from __future__ import annotations

from collections.abc import Sequence

from tuner.study.results.metrics import LOAD_DEPENDENT, constraint_target, load_warning
from tuner.study.specs.proxy import resolve_model_args
from tuner.study.specs.spec import StudySpec
from tuner.study.workflows.start import StartPoint, start_points


def spec_warnings(spec: StudySpec, points: Sequence[StartPoint] | None = None) -> list[str]:
    """What a valid spec should still reconsider, one line each (none stops the study): an
    objective or constraint on a load-dependent metric (`metrics.LOAD_DEPENDENT`), which
    measures the machine's load as much as the recipe; a ``[start]`` baseline value clipped to
    the space (the notes of ``points``, the study's start points, computed here when not given).
    """
    roles = [(name, "objective") for name, _ in spec.objectives]
    roles += [(constraint_target(key)[0], "constraint") for key, _ in spec.constraints]
    if points is None:
        points = start_points(spec, resolve_model_args(spec)) if spec.start.baselines else []
    return ([load_warning(name, role) for name, role in roles if name in LOAD_DEPENDENT]
            + [n for p in points for n in p.notes])
