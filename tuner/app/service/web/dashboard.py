"""Optuna's dashboard, mounted read-only, with infeasible trials shown as infeasible.

The dashboard is given a view of the study storage, not the storage itself: every write is
refused (its own API would create, rename and delete studies and tell trials, bypassing the
service's owners), and each trial it reads carries its constraint values under the single
``constraints`` list the dashboard reads (optuna-dashboard 0.21, ``_serializer.py``:
``trial_system_attrs.get("constraints", [])``). Optuna 5.0 stores one ``constraints:<name>``
key per constraint instead, so without the view the dashboard shows every trial as feasible.
The list exists only in what the dashboard sees: the stored trial is unchanged, so
``trial.constraints`` (what the samplers learn from) is unchanged too.
"""

from __future__ import annotations

import copy
from typing import Any

import optuna
from optuna.trial import FrozenTrial

CONSTRAINT_PREFIX = "constraints:"  # optuna 5.0's per-constraint system attribute
DASHBOARD_KEY = "constraints"  # what optuna-dashboard reads


class ReadOnlyStorage(PermissionError):
    """The dashboard tried to change the storage."""


class DashboardStorage:
    """A read-only view of ``inner`` for the dashboard (see the module docstring)."""

    def __init__(self, inner: optuna.storages.BaseStorage) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("set_", "create_", "delete_")):
            raise ReadOnlyStorage(f"dashboard: {name} refused; change studies through moetune.")
        return getattr(self._inner, name)

    def get_trial(self, trial_id: int) -> FrozenTrial:
        return with_constraint_list(self._inner.get_trial(trial_id))

    def get_all_trials(self, study_id: int, deepcopy: bool = True,
                       states: Any = None) -> list[FrozenTrial]:
        return [with_constraint_list(t)
                for t in self._inner.get_all_trials(study_id, deepcopy=deepcopy, states=states)]


optuna.storages.BaseStorage.register(DashboardStorage)


def with_constraint_list(trial: FrozenTrial) -> FrozenTrial:
    """A copy of ``trial`` whose system attributes also hold its constraint values as the one
    list the dashboard reads, in stored order."""
    values = [v for k, v in trial.system_attrs.items() if k.startswith(CONSTRAINT_PREFIX)]
    if not values or DASHBOARD_KEY in trial.system_attrs:
        return trial
    out = copy.copy(trial)
    out.system_attrs = {**trial.system_attrs, DASHBOARD_KEY: values}
    return out
