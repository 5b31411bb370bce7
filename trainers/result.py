"""TrainResult: what one proxy training measured, labelled by how it was measured."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

MemoryMethod = Literal["cuda_allocator", "cpu_accounting"]
GIB = 1024**3  # bytes per GiB: every memory figure moetune reports is in GiB
MAX_CURVE_POINTS = 200  # a stored train curve keeps at most this many points


@dataclass(frozen=True, kw_only=True)
class TrainResult:
    """Outcome of `trainers.train`.

    A diverged run (NaN/inf loss) is a result, not an exception: ``diverged`` is True,
    ``diverged_step`` says where, ``val_loss`` is ``inf``.

    Fields:
        val_loss: mean next-token loss on the fixed held-out batches at the end of training.
        eval_curve: ``[(tokens_seen, val_loss), ...]`` at every evaluation.
        train_curve: ``[(tokens_seen, train_loss), ...]`` at every optimizer step.
        tokens_trained / steps: data actually consumed (the batch schedule changes steps only).
        tokens_per_s: training tokens per second of training time (evaluations excluded).
        peak_memory_bytes: CUDA allocator peak, or on CPU the exact sum of parameters, gradients,
            optimizer state and the peak of saved activations (``peak_memory_method`` says which).
        activation_bytes: peak bytes of tensors saved for backward in one forward/backward.
        max_vio_batch: mean over steps of the per-batch MaxVio (max load − mean) / mean.
        max_vio_val: MaxVio of the expert load summed over the validation set.
        loss_spikes / loss_spike_steps: steps whose loss exceeded spike_factor × running mean.
        fp8_emulated: True when fp8 GEMMs were quantize/dequantize emulation (numerics faithful,
            speed not); False when run with ``torch._scaled_mm``; None when precision != fp8.
        stopped_early: ``on_eval`` returned "stop".
    """

    val_loss: float
    eval_curve: list[tuple[int, float]]
    train_curve: list[tuple[int, float]]
    tokens_trained: int
    token_budget: int
    steps: int
    tokens_per_s: float
    train_time_s: float
    peak_memory_bytes: int
    peak_memory_method: MemoryMethod
    activation_bytes: int
    max_vio_batch: float
    max_vio_val: float
    loss_spikes: int
    loss_spike_steps: list[int]
    grad_norm_mean: float
    grad_norm_max: float
    diverged: bool
    diverged_step: int | None
    stopped_early: bool
    precision: str
    fp8_emulated: bool | None
    seed: int
    corpus_hash: str
    n_params: int
    n_active_params: int
    environment: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (inf/NaN become strings so strict JSON encoders accept them)."""
        return {k: json_safe(v) for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrainResult:
        """Inverse of `to_dict` (unknown keys ignored, so older and newer records load)."""
        names = {f.name for f in dataclasses.fields(cls)}
        out: dict[str, Any] = {}
        for k, v in d.items():
            if k not in names:
                continue
            if isinstance(v, str) and v in NON_FINITE and k != "corpus_hash":
                v = float(v)
            if k in ("eval_curve", "train_curve"):
                v = [(int(t), to_float(x)) for t, x in v]
            out[k] = v
        return cls(**out)


# -- the one inf/NaN codec: every stored number goes through these two ------------------------

NON_FINITE = ("inf", "-inf", "nan")
# Beyond this magnitude a metric is a numeric blow-up, not a measurement (a loss of -1e308):
# such a value counts as non-finite, so it is never ranked, plotted or fed to a sampler.
MAX_MAGNITUDE = 1e100


def is_usable(v: float) -> bool:
    """Finite and within ±`MAX_MAGNITUDE`: a value moetune ranks, plots and optimises."""
    return math.isfinite(v) and abs(v) <= MAX_MAGNITUDE


def json_safe(v: Any) -> Any:
    """``v`` with every non-finite float (nested in lists, tuples, dicts) as its string."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    if isinstance(v, dict):
        return {k: json_safe(x) for k, x in v.items()}
    return v


def to_float(v: Any, default: float = math.nan) -> float:
    """A stored number back as a float: numbers as they are, ``"inf"``/``"-inf"``/``"nan"``
    as floats; anything else (None, other text, bools) is ``default``."""
    if isinstance(v, bool) or v is None:
        return default
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str) and v in NON_FINITE:
        return float(v)
    return default


def thin_curve(curve: Sequence[tuple[int, float]],
               max_points: int = MAX_CURVE_POINTS) -> list[tuple[int, float]]:
    """At most ``max_points`` evenly spaced points of a (tokens, value) curve, the last kept."""
    pts = list(curve)
    if len(pts) <= max_points:
        return pts
    kept = pts[::math.ceil(len(pts) / max_points)]
    if kept[-1] != pts[-1]:
        kept[-1] = pts[-1]
    return kept
