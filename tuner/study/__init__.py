"""The study core (floor 3): a study from its spec to its stored, typed trial records.

Spec (`parse_spec` pure, `check_inputs` the file checks), storage (database, study, schema,
resume), the typed trial record and its reasons, the metric table, the one ranking (Pareto rank,
crowding, knee), samplers, the Ray Tune ⇄ Optuna searcher, the trial function and the runner.

Names are imported on first use, so that a Ray worker importing `tuner.study.trainable` does
not pull in Optuna, and a light command does not pull in Ray.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "SpecError": "tuner.study.spec", "StudySpec": "tuner.study.spec",
    "load_spec": "tuner.study.spec", "parse_spec": "tuner.study.spec",
    "check_inputs": "tuner.study.spec", "Metric": "tuner.study.metrics",
    "MetricContext": "tuner.study.metrics", "register_metric": "tuner.study.metrics",
    "TrialRecord": "tuner.study.trial_record", "trial_records": "tuner.study.trial_record",
    "StudySummary": "tuner.study.runner", "run_study": "tuner.study.runner",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'tuner.study' has no attribute {name!r}")
