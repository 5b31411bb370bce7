"""How each reported quantity was obtained: measured, emulated or modeled.

Reports put these labels next to every value so that nobody mistakes a CPU emulation of fp8 for
an fp8 speed, or a full-scale estimate for a measurement.
"""

from __future__ import annotations

import pandas as pd

from tuner.modeling.fp8_speed import BLOCKWISE_H100
from tuner.study.specs.metrics import TIMED, is_modeled

MEMORY_METHODS = {
    "cuda_allocator": "measured: CUDA allocator peak",
    "cpu_accounting": "measured: exact byte count of params, grads, optimizer state, activations",
}
SPEED_WORDS = ("tokens_per_s", "throughput", "speed", "time", "mfu")


def quantity_label(name: str, frame: pd.DataFrame) -> str:
    """Provenance of the column `name` across the trials in `frame`, in words."""
    if is_modeled(name):
        fp8 = name == "full_gpu_hours" and bool(
            frame.get("precision", pd.Series(dtype=object)).eq("fp8").any())
        return "modeled (full-scale cost model" + (
            f"; fp8 speed: modeled from {BLOCKWISE_H100.short})" if fp8 else ")")
    emulated = bool(frame.get("fp8_emulated", pd.Series(dtype=object)).eq(True).any())
    if "memory" in name:
        methods = sorted(set(frame.get("peak_memory_method", pd.Series(dtype=object)).dropna()))
        return "; ".join(MEMORY_METHODS.get(m, f"measured: {m}") for m in methods) or "measured"
    if name in TIMED:
        return ("measured alone on the cores, once per systems signature (median of repeats)"
                + ("; fp8 trials emulated on CPU, so their speed is not fp8 speed"
                   if emulated else ""))
    if any(w in name for w in SPEED_WORDS):
        return ("measured; fp8 trials emulated on CPU, so their speed is not fp8 speed"
                if emulated else "measured")
    return "measured; fp8 numerics emulated on CPU" if emulated else "measured"


def precision_label(precision: object, fp8_emulated: object) -> str:
    """``fp8 (emulated)`` / ``fp8 (native)`` / ``bf16``; empty when unknown."""
    if not isinstance(precision, str):
        return ""
    if precision == "fp8" and fp8_emulated is True:
        return "fp8 (emulated)"
    if precision == "fp8" and fp8_emulated is False:
        return "fp8 (native)"
    return precision


LEGEND = (
    "Labels: *measured* = observed in the proxy run; *emulated* = fp8 GEMMs run as "
    "quantize/dequantize on a device without fp8 kernels (loss numerics faithful, speed not); "
    "*modeled* = full-scale estimate from the cost model (`full_*`), never measured."
)


SHORT_MEMORY = {"cuda_allocator": "CUDA allocator", "cpu_accounting": "CPU byte count"}


def short_label(name: str, frame: pd.DataFrame) -> str:
    """Short provenance tag for axis titles: measured / emulated / modeled, and how."""
    if is_modeled(name):
        return "modeled"
    if "memory" in name:
        methods = sorted(set(frame.get("peak_memory_method", pd.Series(dtype=object)).dropna()))
        return "measured: " + ", ".join(SHORT_MEMORY.get(m, m) for m in methods) if methods \
            else "measured"
    emulated = bool(frame.get("fp8_emulated", pd.Series(dtype=object)).eq(True).any())
    if name in TIMED:
        return "measured alone" + ("; fp8 emulated: not fp8 speed" if emulated else "")
    if emulated and any(w in name for w in SPEED_WORDS):
        return "measured; fp8 emulated: not fp8 speed"
    return "measured; fp8 emulated" if emulated else "measured"


def axis_title(name: str, frame: pd.DataFrame) -> str:
    """``name [measured]`` and the like."""
    return f"{name} [{short_label(name, frame)}]"
