"""A spec's file checks where the service's drivers run: on this machine for the service's own
Ray, else in a Ray task on the cluster (data and model paths are cluster paths there). Ray is
imported here, not in `tuner.app.service.context`, which holds the storage's Optuna side."""

from __future__ import annotations

from typing import Any

import ray

from tuner.study.specs.spec import SpecError, StudySpec, check_inputs, parse_spec


def check_inputs_here(spec: StudySpec) -> SpecError | None:
    """The spec's file checks: None if they pass, else the error (its ``field`` kept)."""
    try:
        check_inputs(spec)
    except SpecError as e:
        return e
    return None


def _check_table_inputs(table: dict[str, Any]) -> SpecError | None:
    """`check_inputs_here` of a spec sent as its table to another process (parsed there, once)."""
    return check_inputs_here(parse_spec(table))


_check_on_cluster = ray.remote(num_cpus=0)(_check_table_inputs)


def check_inputs_on_cluster(spec: StudySpec) -> SpecError | None:
    """`check_inputs_here`, run by a Ray task on the cluster the service joined."""
    result: SpecError | None = ray.get(_check_on_cluster.remote(spec.to_dict()))
    return result
