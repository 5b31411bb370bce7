"""Full-run modeling (floor 2½): pure functions of model, recipe, target and hardware.

The cost model (parameters, FLOPs, memory per GPU, GPU-hours; fp8's speed per GEMM shape from
published kernel figures), the scaling rules that carry a
proxy recipe to a full run, the hardware registry, the published targets, the parallel layouts
the launch consumers accept, the published ranges exported numbers are checked against, and
`build_full_run`, which combines them.
Everything here is *modeled*, never measured.
"""

from __future__ import annotations

from tuner.modeling.cost_model import (
    ParallelPlan,
    ParamCount,
    count_params,
    gpu_hours,
    memory_per_gpu,
)
from tuner.modeling.fp8_speed import Fp8Speed
from tuner.modeling.full_run import (
    DEFAULT_MFU,
    ExportError,
    FullRun,
    FullRunTarget,
    build_full_run,
    load_target,
)
from tuner.modeling.hardware import HARDWARE, Hardware, get_hardware
from tuner.modeling.layout_rules import layout_errors
from tuner.modeling.targets import TARGETS, published_target

__all__ = ["DEFAULT_MFU", "HARDWARE", "TARGETS", "ExportError", "Fp8Speed", "FullRun",
           "FullRunTarget", "Hardware", "ParallelPlan", "ParamCount", "build_full_run",
           "count_params", "get_hardware", "gpu_hours", "layout_errors", "load_target",
           "memory_per_gpu", "published_target"]
