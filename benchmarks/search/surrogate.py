"""Surrogate objective: interpolation of recorded real runs (``grid.json``), NOT a training.

Maps any point of the benchmark space (the knobs of ``search_spaces/quickstart.toml`` plus
precision) to the learning curve and final metrics a real ``debug`` proxy run would have, by
multilinear interpolation over the recorded grid in normalised coordinates (log lr, warmup,
log bias_update_speed), exactly per batch_schedule (categorical). fp8 points are the bf16
interpolation plus the measured fp8 − bf16 loss offset at matched grid points (interpolated in
log lr). Throughput and peak memory come from ``throughput.json`` when given: the median of
repeated runs per batch_schedule × precision, each alone on the machine (the computation does
not depend on lr, warmup or γ, and the grid's own per-run speeds share the cores with other
work). Without it they are interpolated from the grid like the loss. fp8 was emulated on CPU,
so its speed describes emulation, not fp8 hardware.

A study replayed on it costs milliseconds per trial, and every trial has intermediate values at
the recorded evaluation points, which is what ASHA needs to prune.

    >>> s = Surrogate.load()                                   # doctest: +SKIP
    >>> s.evaluate({"lr": 3e-3, "warmup_fraction": 0.05, "batch_schedule": "linear",
    ...             "bias_update_speed": 1e-3, "precision": "bf16"}).val_loss  # doctest: +SKIP
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

GRID = Path(__file__).resolve().parent / "grid.json"
THROUGHPUT = Path(__file__).resolve().parent / "throughput.json"
LABEL = "surrogate: interpolation of recorded real runs (benchmarks/search/grid.json)"
# Interpolated axes: name, log-scaled?
AXES = (("lr", True), ("warmup_fraction", False), ("bias_update_speed", True))
SCHEDULES = ("constant", "linear", "step")
PRECISIONS = ("bf16", "fp8")


@dataclass(frozen=True, kw_only=True)
class SurrogateRun:
    """What the surrogate predicts for one recipe; ``label`` says it is not a real training."""

    curve: list[tuple[int, float]]  # (tokens_seen, val_loss) at every recorded evaluation
    val_loss: float
    tokens_per_s: float
    peak_memory_bytes: float
    diverged: bool
    label: str = LABEL


class Surrogate:
    """Interpolates a recorded grid of real runs (see the module docstring)."""

    def __init__(self, data: dict[str, Any], throughput: dict[str, Any] | None = None) -> None:
        self.meta = data["meta"]
        self.label = LABEL
        self.token_budget = int(self.meta["token_budget"])
        runs = [r for r in data["runs"] if r["preset"] == "debug"]
        base = [r for r in runs if r["precision"] == "bf16" and r["seed"] == 0]
        self.levels = {name: sorted({r["params"][name] for r in base}) for name, _ in AXES}
        shape = tuple(len(v) for v in self.levels.values())
        self._tokens: dict[str, list[int]] = {}
        self._curves: dict[str, np.ndarray] = {}
        self._tps: dict[str, np.ndarray] = {}
        self._mem: dict[str, np.ndarray] = {}
        for sched in SCHEDULES:
            rows = [r for r in base if r["params"]["batch_schedule"] == sched]
            if len(rows) != math.prod(shape):
                raise ValueError(f"grid: schedule {sched!r} has {len(rows)} runs, "
                                 f"need the full grid {shape}")
            self._tokens[sched] = [t for t, _ in rows[0]["curve"]]
            n = len(self._tokens[sched])
            curves = np.full(shape + (n,), np.nan)
            tps, mem = np.full(shape, np.nan), np.full(shape, np.nan)
            for r in rows:
                idx = tuple(self.levels[a].index(r["params"][a]) for a, _ in AXES)
                curves[idx] = _curve_values(r, n)
                tps[idx], mem[idx] = r["tokens_per_s"], r["peak_memory_bytes"]
            self._curves[sched], self._tps[sched], self._mem[sched] = curves, tps, mem
        self._fp8 = _fp8_offsets(runs, base)
        # (schedule, precision) -> (tokens_per_s, peak_memory_bytes), medians of repeats
        reps: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for r in (throughput or {}).get("runs", []):
            reps.setdefault((r["params"]["batch_schedule"], r["precision"]), []).append(
                (r["tokens_per_s"], r["peak_memory_bytes"]))
        self._speed = {k: (float(np.median([a for a, _ in v])),
                           float(np.median([b for _, b in v]))) for k, v in reps.items()}
        self.speed_source = "throughput.json" if self._speed else "grid.json"

    @classmethod
    def load(cls, path: str | Path = GRID, throughput: str | Path | None = THROUGHPUT
             ) -> Surrogate:
        """The shipped grid (and throughput table, if recorded); pass throughput=None to
        interpolate speed from the grid instead."""
        tp = Path(throughput) if throughput is not None else None
        return cls(json.loads(Path(path).read_text()),
                   json.loads(tp.read_text()) if tp is not None and tp.exists() else None)

    def evaluate(self, params: dict[str, Any]) -> SurrogateRun:
        """Interpolated learning curve and final metrics for ``params``.

        Args:
            params: lr, warmup_fraction, bias_update_speed (inside the recorded ranges; values
                outside are clamped to the edge), batch_schedule, and optionally precision
                (bf16 by default).
        """
        sched = params["batch_schedule"]
        if sched not in SCHEDULES:
            raise ValueError(f"batch_schedule: must be one of {SCHEDULES}, but got {sched!r}.")
        precision = params.get("precision", "bf16")
        if precision not in PRECISIONS:
            raise ValueError(f"precision: must be one of {PRECISIONS}, but got {precision!r}.")
        weights = self._weights(params)
        curve = _blend(self._curves[sched], weights)
        tps = float(_blend(self._tps[sched], weights))
        mem = float(_blend(self._mem[sched], weights))
        if precision == "fp8":
            curve = curve + np.interp(math.log(params["lr"]), *self._fp8["loss_offset"])
            tps *= self._fp8["tps_ratio"]
            mem *= self._fp8["mem_ratio"]
        if (sched, precision) in self._speed:
            tps, mem = self._speed[(sched, precision)]
        diverged = not np.all(np.isfinite(curve))
        pts = [(t, float(v)) for t, v in zip(self._tokens[sched], curve, strict=True)]
        return SurrogateRun(curve=pts, val_loss=float(curve[-1]), tokens_per_s=tps,
                            peak_memory_bytes=mem, diverged=diverged)

    def _weights(self, params: dict[str, Any]) -> list[tuple[tuple[int, ...], float]]:
        """Corner indices and multilinear weights of the grid cell holding ``params``."""
        per_axis = []
        for name, log in AXES:
            lv = np.log(self.levels[name]) if log else np.asarray(self.levels[name], float)
            x = math.log(params[name]) if log else float(params[name])
            x = min(max(x, lv[0]), lv[-1])
            i = int(min(np.searchsorted(lv, x, side="right") - 1, len(lv) - 2))
            f = (x - lv[i]) / (lv[i + 1] - lv[i])
            per_axis.append(((i, 1.0 - f), (i + 1, f)))
        out = []
        for corner in itertools.product(*per_axis):
            w = math.prod(c[1] for c in corner)
            if w > 0:
                out.append((tuple(c[0] for c in corner), w))
        return out


def _curve_values(run: dict, n: int) -> np.ndarray:
    vals = [float(v) for _, v in run["curve"]]
    if run["diverged"] or len(vals) < n:  # a diverged run stops early: the rest is inf
        vals = vals + [math.inf] * (n - len(vals))
    return np.asarray(vals[:n], float)


def _blend(table: np.ndarray, weights: list[tuple[tuple[int, ...], float]]) -> np.ndarray:
    # A diverged corner makes the whole cell diverge: interpolating towards inf says so.
    return sum(table[idx] * w for idx, w in weights)


def _fp8_offsets(runs: list[dict], base: list[dict]) -> dict[str, Any]:
    """fp8 − bf16 at matched grid points: final-loss offset per lr, speed and memory ratios."""
    def key(r: dict) -> tuple:
        return tuple(sorted(r["params"].items()))

    by_key = {key(r): r for r in base}
    pairs = [(r, by_key[key(r)]) for r in runs
             if r["precision"] == "fp8" and key(r) in by_key]
    if not pairs:
        return {"loss_offset": ([0.0], [0.0]), "tps_ratio": 1.0, "mem_ratio": 1.0}
    lrs = sorted({f["params"]["lr"] for f, _ in pairs})
    offs = [float(np.mean([_final(f) - _final(b) for f, b in pairs if f["params"]["lr"] == lr]))
            for lr in lrs]
    return {"loss_offset": ([math.log(lr) for lr in lrs], offs),
            "tps_ratio": float(np.median([f["tokens_per_s"] / b["tokens_per_s"]
                                          for f, b in pairs])),
            "mem_ratio": float(np.median([f["peak_memory_bytes"] / b["peak_memory_bytes"]
                                          for f, b in pairs]))}


def _final(run: dict) -> float:
    return float(run["val_loss"])


def holdout_error(data: dict[str, Any]) -> dict[str, float]:
    """How far the interpolation is from real runs it did not see: drop each interior lr level
    of the grid in turn, predict its runs from the rest, compare final val_loss (absolute)."""
    base = [r for r in data["runs"] if r["precision"] == "bf16" and r["seed"] == 0]
    lrs = sorted({r["params"]["lr"] for r in base})
    errs = []
    for lr in lrs[1:-1]:
        kept = {"meta": data["meta"], "runs": [r for r in data["runs"]
                                                if r["params"]["lr"] != lr]}
        s = Surrogate(kept)
        for r in base:
            if r["params"]["lr"] == lr and not r["diverged"]:
                errs.append(abs(s.evaluate(r["params"]).val_loss - float(r["val_loss"])))
    a = np.asarray(errs)
    return {"n": len(a), "median": float(np.median(a)), "p90": float(np.percentile(a, 90)),
            "max": float(a.max())}
