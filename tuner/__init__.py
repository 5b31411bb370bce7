"""tuner: the moetune service — study spec, Ray Tune ⇄ Optuna bridge, storage, CLI.

    >>> from tuner import load_spec, run_study
    >>> spec = load_spec("search_spaces/quickstart.toml")  # doctest: +SKIP
    >>> run_study(spec, run_dir=Path("runs") / spec.name)  # doctest: +SKIP

Names are imported on first use: trial workers import `tuner.trainable` without pulling in
Optuna, and the CLI's light commands start without Ray.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Metric": "tuner.objectives", "MetricContext": "tuner.objectives",
    "register_metric": "tuner.objectives", "SpecError": "tuner.spec", "StudySpec": "tuner.spec",
    "load_spec": "tuner.spec", "StudySummary": "tuner.study_runner",
    "run_study": "tuner.study_runner",
    "ExportError": "tuner.export", "FullRun": "tuner.export", "FullRunTarget": "tuner.export",
    "build_full_run": "tuner.export", "export_study": "tuner.export", "Pick": "tuner.pick",
    "pick_trial": "tuner.pick", "Hardware": "tuner.hardware", "get_hardware": "tuner.hardware",
    "ParamCount": "tuner.cost_model", "ParallelPlan": "tuner.cost_model",
    "count_params": "tuner.cost_model", "memory_per_gpu": "tuner.cost_model",
    "gpu_hours": "tuner.cost_model",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'tuner' has no attribute {name!r}")
