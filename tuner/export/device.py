"""A systems knob chosen by timing the proxy on one device, carried to a full run on another.

A study with a timed objective or constraint (`tuner.study.specs.metrics.TIMED`) ranks its
systems knobs by how fast the proxy ran on the study's device. Where the export carries such a knob
to the full run unchanged (a rule of kind ``carried``: the precision), the choice rested on that
device's speed at the proxy's GEMM shapes, not the target's at the full run's: on a CPU fp32 times
faster than bf16, on an H800 bf16 costs half of fp32, and fp8 that loses at a proxy's small GEMMs
gains at the full run's. `timed_choice_warnings` says so, with the modeled cost on the target of
each value the study tried for that knob.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from tuner.export.pick import Picked, finished_trials
from tuner.modeling.full_run import FullRun, FullRunTarget, modeled_cost
from tuner.study.results.trial_record import study_objectives
from tuner.study.specs import metrics
from tuner.study.specs.metrics import SYSTEMS_FIELDS
from tuner.study.store import records


def timed_names(study: Any) -> list[str]:
    """The study's timed objectives and constraints, by metric name."""
    names = [o.name for o in study_objectives(study)]
    names += [metrics.constraint_target(k)[0]
              for k in (study.user_attrs.get(records.CONSTRAINTS) or {})]
    return sorted({n for n in names if n in metrics.TIMED})


def timed_choice_warnings(study: Any, picked: Picked, full: FullRun,
                          target: FullRunTarget) -> list[str]:
    """One warning per searched systems knob the export carries unchanged, in a timed study."""
    timed = timed_names(study)
    if not timed:
        return []
    r = picked.record
    carried = {rule.field for rule in full.rules if rule.kind == "carried"}
    knobs = [p for p in r.params if p in SYSTEMS_FIELDS and p in carried]
    device = r.device or "the proxy's device"
    out = []
    for knob in knobs:
        tried = sorted({t.params[knob] for t in finished_trials(study) if knob in t.params},
                       key=str)
        costs = []
        for value in tried:
            recipe = dataclasses.replace(r.recipe, **{knob: value})
            hours = modeled_cost(recipe, r.model_args, target, r.token_budget)[1]
            if math.isfinite(hours):
                costs.append(f"{value} {hours / 1e6:.3g}M")
        out.append(
            f"{knob} {r.params[knob]!r} was chosen on {', '.join(timed)}, the proxy's speed "
            f"timed on {device}: neither that device nor the proxy's GEMM shapes are the full "
            f"run's on {target.hardware.name}. There the cost model gives "
            f"{', '.join(costs) or 'no value that fits'} GPU-hours (modeled); rank on "
            "full_gpu_hours to choose by the full run's cost.")
    return out
