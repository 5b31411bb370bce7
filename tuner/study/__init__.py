"""The study core (floor 3): a study from its spec to its stored, typed trial records.

Six rooms, each a sub-package, in floors (docs/architecture.md gives each its row; a room
imports only from the rooms below it, so no two import each other):

- `tuner.study.specs`: the spec and its sections (`parse_spec` pure, `check_inputs` the file
  checks), ``[start]``, ``[ladder]``, ``[law]``, the proxy a spec resolves to, the metric table.
- `tuner.study.store`: the database URL, the Optuna study and its schema, the stored records,
  the one-driver lease, stop requests.
- `tuner.study.results`: the typed trial record and its reasons, a trial's end as an outcome,
  the one ranking (Pareto rank, crowding, knee), noise and its ties, diagnostics.
- `tuner.study.trial`: trials on Ray: the one training call, the trial function, the Ray
  Tune ⇄ Optuna searcher, samplers, schedulers, the Ray connection, timing, the cores.
- `tuner.study.run`: one study start to end: the preflight (`prepare` → `Plan`), the runner,
  the resume rules, the start points, warm start, the noise re-trainings.
- `tuner.study.workflows`: several studies or re-trainings on top: the ladder, the law and its
  fit, rerun, validate.

Names are imported on first use, so that a Ray worker importing `tuner.study.trial.trainable`
does not pull in Optuna, and a light command does not pull in Ray.
"""

from __future__ import annotations

import importlib
from typing import Any

_SPEC, _METRICS, _RECORD = ("tuner.study.specs.spec", "tuner.study.specs.metrics",
                            "tuner.study.results.trial_record")
_EXPORTS = {
    "SpecError": _SPEC, "StudySpec": _SPEC, "load_spec": _SPEC, "parse_spec": _SPEC,
    "check_inputs": _SPEC, "Metric": _METRICS, "MetricContext": _METRICS,
    "register_metric": _METRICS, "TrialRecord": _RECORD, "trial_records": _RECORD,
    "StudySummary": "tuner.study.run.runner", "run_study": "tuner.study.run.runner",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'tuner.study' has no attribute {name!r}")
