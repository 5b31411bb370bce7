"""A trial's cost free of machine noise: each systems signature timed alone on the cores, cached.

A trial's own tokens/s measures the machine's load as much as its recipe (one recipe gave 7,932,
12,030 and 20,830 tok/s in three studies on one shared 2-core machine). Throughput depends only
on the *systems* knobs — the model, the batch sizes of the run's steps, seq_len, micro batch,
precision, checkpoint ratio, device, threads —, never on lr, warmup, decay, γ or the seed. So it
is measured apart from the quality run, once per distinct *systems signature*:

- `what_key`: a hash of exactly what changes the computation: the model args, seq_len,
  micro_batch, precision, checkpoint_ratio and the run's sequence of step batch sizes
  (`run_steps`, which is what the batch schedule, its start, end, ramp, multiple and the token
  budget come to). `signature` adds where it runs: device, torch threads, the CPU or GPU model,
  the torch version and the step timer.
- `probe`: trains that configuration with the real loop (`trainers.loop.StepTimer`, the same
  `_Run.step` a trial runs) for `STEPS` timed steps at each batch size it times
  (`timed_sizes`: each of up to three; of a ramp, the smallest, the largest and the one
  carrying most tokens), after `WARMUP_STEPS` untimed ones, and turns them into the seconds of
  the whole run's steps (`run_seconds`: every step at its own batch size; sizes in between
  interpolated linearly).
  On a CPU with one torch thread per trial a step is timed by its CPU time (the thread's:
  forward, backward and optimizer all run there), which equals its wall time on idle cores and
  does not grow when other processes, which no lock pauses (the machine's other users), take
  turns on the core; with more threads (whose spin-waits count as CPU time) or on a GPU, by
  its wall time, so only moetune's own trials are kept off the cores.
  One such pass is a repeat; repeats go on until their relative spread, (max − min) / median,
  is at most `TARGET_SPREAD` (at least `MIN_REPEATS`, at most `MAX_REPEATS`). The result is
  the median tokens/s, the spread and every repeat. fp8 on a device without fp8 kernels is
  emulated: the entry is labelled ``emulated`` (its speed is not fp8's).
- `measure`: the probe runs holding the machine's cores exclusive (`tuner.study.trial.cores`):
  every trial of every study on the machine pauses at its next step boundary. The study's timings
  come in ``cached`` (the driver reads them from the study's storage: a resume reuses them); on a
  miss, the probe's entry is also written to a file per study and signature in the temp dir, read
  again once the lock is held, so two trials of one signature that start together probe once.
  The trial reports the entry; the driver stores it in the study (`tuner.study.store.records`
  TIMING_PREFIX) and scores ``timed_tokens_per_s`` with it (`tuner.study.specs.metrics`).

Ray workers import this module: no Optuna, no spec.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from trainers.config.model_args import ModelArgs
from trainers.config.recipe import Recipe
from trainers.config.schedules import batch_size_at
from trainers.result import json_safe
from tuner.study.trial.cores import CoreLock, machine_lock

if TYPE_CHECKING:
    from trainers.data import Data
    from trainers.loop import StepTime

METHOD = 1  # bump when the probe's procedure changes: older entries then no longer match
STEPS = 3  # timed steps per batch size and repeat
WARMUP_STEPS = 2  # untimed steps per batch size before the first repeat (allocations, kernels)
MIN_REPEATS = 3
MAX_REPEATS = 7
TARGET_SPREAD = 0.03  # (max − min) / median of the repeats' tokens/s at which repeats stop
CACHE_DIR = "moetune-timings"
_SCOPE_RE = re.compile(r"[0-9a-f]{32}")


class StepTimer(Protocol):
    """`trainers.loop.StepTimer`'s interface (fakes in `tuner.testing` have it too)."""

    fp8_emulated: bool | None

    def step(self, n_seqs: int) -> StepTime: ...


# -- the signature -----------------------------------------------------------------------------

def run_steps(recipe: Recipe, token_budget: int) -> list[tuple[int, int]]:
    """The batch sizes of a run's steps as ``[(batch, steps in a row), ...]``, exactly as
    `trainers.train` takes them (the budget rounded down to whole sequences, a last batch cut to
    what is left)."""
    seq = recipe.seq_len
    budget = token_budget // seq * seq
    tokens, out = 0, list[tuple[int, int]]()
    while tokens < budget:
        planned = batch_size_at(recipe, tokens, budget)
        n = min(planned, (budget - tokens) // seq)
        k = _run_length(recipe, tokens, n, budget) if n == planned else 1
        tokens += k * n * seq
        if out and out[-1][0] == n:
            out[-1] = (n, out[-1][1] + k)
        else:
            out.append((n, k))
    return out


def _run_length(recipe: Recipe, tokens: int, n: int, budget: int) -> int:
    """How many steps in a row from ``tokens`` on take an uncut batch of ``n``. The schedule never
    decreases, so those steps are one run: found by bisection, not one step at a time (a long
    budget of small batches has millions of steps)."""
    seq = recipe.seq_len

    def same(j: int) -> bool:
        t = tokens + (j - 1) * n * seq
        return batch_size_at(recipe, t, budget) == n and (budget - t) // seq >= n

    lo, hi = 1, (budget - tokens) // (n * seq)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if same(mid) else (lo, mid - 1)
    return lo


def what_key(model_args: ModelArgs, recipe: Recipe, token_budget: int) -> str:
    """Hash of what changes the computation of a run's steps (module docstring); lr, warmup,
    decay, betas, weight decay, clipping, γ, α, λ, the spike policy and the seed are not in
    it."""
    return _hash({"method": METHOD, "model_args": model_args.to_dict(),
                  "seq_len": recipe.seq_len, "micro_batch": recipe.micro_batch,
                  "precision": recipe.precision, "checkpoint_ratio": recipe.checkpoint_ratio,
                  "steps": run_steps(recipe, token_budget)})


@dataclass(frozen=True, kw_only=True)
class Where:
    """Where a probe runs: what, besides the configuration, sets its speed."""

    device: str  # "cpu" or "cuda"
    threads: int
    hardware: str  # CPU or GPU model
    torch: str
    timer: str  # the step timer's class

    @property
    def clock(self) -> str:
        """``cpu`` (the stepping thread's CPU time) on a CPU at one thread, else ``wall``."""
        return "cpu" if self.device == "cpu" and self.threads == 1 else "wall"

    @classmethod
    def here(cls, device: str, timer: type) -> Where:
        import torch

        kind = device.split(":")[0]
        return cls(device=kind, threads=torch.get_num_threads(),
                   hardware=_gpu_name(device) if kind == "cuda" else cpu_model(),
                   torch=torch.__version__, timer=f"{timer.__module__}.{timer.__qualname__}")


def signature(what: str, where: Where) -> str:
    """The systems signature: `what_key` and where it runs."""
    return _hash({"what": what, "where": where.__dict__})


def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


@functools.cache
def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what `platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} ({platform.machine()})"
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpu_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name(torch.device(device))


# -- the probe ---------------------------------------------------------------------------------

def timed_sizes(steps: Sequence[tuple[int, int]]) -> tuple[int, ...]:
    """The batch sizes a probe times: every size of the run's full steps when there are at most
    three (a constant batch, a step schedule), else the smallest, the largest and the one that
    trains most tokens (a ramp). A last step cut short is left out: it is interpolated."""
    full = list(steps)
    if len(full) > 1 and full[-1][1] == 1 and full[-1][0] < full[-2][0]:
        full = full[:-1]
    tokens: dict[int, int] = {}
    for n, k in full:
        tokens[n] = tokens.get(n, 0) + n * k
    if len(tokens) <= 3:
        return tuple(sorted(tokens))
    most = max(tokens, key=lambda n: (tokens[n], n))
    return tuple(sorted({min(tokens), max(tokens), most}))


def run_seconds(steps: Sequence[tuple[int, int]], per_step: Mapping[int, float]) -> float:
    """Seconds of all of a run's steps, each at its batch size: timed sizes as timed, sizes in
    between linearly interpolated, a size below the smallest timed one in proportion to it."""
    points = sorted(per_step.items())

    def at(n: int) -> float:
        lo = points[0]
        if n <= lo[0]:
            return lo[1] * n / lo[0]
        for hi in points[1:]:
            if n <= hi[0]:
                return lo[1] + (hi[1] - lo[1]) * (n - lo[0]) / (hi[0] - lo[0])
            lo = hi
        return lo[1] * n / lo[0]

    return sum(k * at(n) for n, k in steps)


def spread(values: Sequence[float]) -> float:
    """(max − min) / median: 0.05 = the repeats lie within 5% of their median."""
    med = statistics.median(values)
    return (max(values) - min(values)) / med if med > 0 else float("inf")


def probe(model_args: ModelArgs, recipe: Recipe, *, token_budget: int, data: Data | None,
          device: str, timer: type, clock: str = "wall") -> dict[str, Any]:
    """Time the run's steps (module docstring); the caller holds the cores exclusive.

    The timer trains a recipe with only the trial's systems fields (the rest are `Recipe`'s
    defaults), so the result depends on the signature alone. ``clock``: ``cpu`` or ``wall``
    (`Where.clock`). Returns the entry stored in the study: median tokens/s, spread, repeats,
    seconds per step of each timed size (by the clock, and wall-clock).
    """
    steps = run_steps(recipe, token_budget)
    sizes = timed_sizes(steps)
    tokens = sum(n * k for n, k in steps) * recipe.seq_len
    systems = Recipe(batch_schedule="constant", batch_start=max(sizes), batch_end=max(sizes),
                     seq_len=recipe.seq_len, micro_batch=recipe.micro_batch,
                     precision=recipe.precision, checkpoint_ratio=recipe.checkpoint_ratio)
    t0 = time.monotonic()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    runner: StepTimer = timer(model_args, systems, data=data, device=device)
    for n in sizes:
        for _ in range(WARMUP_STEPS):
            runner.step(n)
    repeats: list[float] = []
    per_size: list[dict[int, float]] = []
    wall: list[dict[int, float]] = []
    while len(repeats) < MAX_REPEATS:
        seconds: dict[int, float] = {}
        walls: dict[int, float] = {}
        for n in sizes:
            if len(sizes) > 1:
                runner.step(n)  # untimed: the first step after a change of shape
            times = [runner.step(n) for _ in range(STEPS)]
            seconds[n] = sum(t.cpu_s if clock == "cpu" else t.wall_s for t in times) / STEPS
            walls[n] = sum(t.wall_s for t in times) / STEPS
        per_size.append(seconds)
        wall.append(walls)
        repeats.append(tokens / run_seconds(steps, seconds))
        if len(repeats) >= MIN_REPEATS and spread(repeats) <= TARGET_SPREAD:
            break
    entry: dict[str, Any] = json_safe({
        "tokens_per_s": statistics.median(repeats), "spread": spread(repeats),
        "repeats": repeats, "clock": clock, "sizes": list(sizes),
        "seconds_per_step": {str(n): statistics.median(s[n] for s in per_size) for n in sizes},
        "wall_seconds_per_step": {str(n): statistics.median(s[n] for s in wall)
                                  for n in sizes},
        "steps_per_size": STEPS, "tokens": tokens,
        "label": "emulated" if runner.fp8_emulated else "measured",
        "probe_s": time.monotonic() - t0, "load_1min_before": load,
        "measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "id": uuid.uuid4().hex})
    return entry


# -- the probe, exclusive and cached -----------------------------------------------------------

def measure(model_args: ModelArgs, recipe: Recipe, *, token_budget: int, data: Data | None,
            device: str, timer: type, scope: str, cached: Iterable[Mapping[str, Any]] = (),
            lock: CoreLock | None = None,
            cache_dir: Path | None = None) -> tuple[dict[str, Any], str]:
    """The timing of this trial's systems signature and where it came from: ``"study"`` (in
    ``cached``, the study's stored timings), ``"shared"`` (another trial of the study probed it
    on this machine), or ``"probed"`` (timed now, holding the cores exclusive)."""
    where = Where.here(device, timer)
    what = what_key(model_args, recipe, token_budget)
    sig = signature(what, where)
    for entry in cached:
        if entry.get("signature") == sig:
            return dict(entry), "study"
    files = _MachineCache(scope, cache_dir)
    hit = files.get(sig)
    if hit is not None:
        return hit, "shared"
    lock = lock or machine_lock()
    t0 = time.monotonic()
    with lock.exclusive():
        waited = time.monotonic() - t0
        hit = files.get(sig)  # probed by another trial while this one waited for the lock
        if hit is not None:
            return hit, "shared"
        entry = probe(model_args, recipe, token_budget=token_budget, data=data, device=device,
                      timer=timer, clock=where.clock)
        entry.update(signature=sig, what=what, where=where.__dict__,
                     lock_wait_s=round(waited, 3))
        files.put(sig, entry)
    return entry, "probed"


class _MachineCache:
    """One JSON file per signature under ``<temp>/moetune-timings/<scope>/``; ``scope`` is the
    study's random id (records.TIMING_SCOPE), so no other study reads this study's timings."""

    def __init__(self, scope: str, root: Path | None) -> None:
        if not _SCOPE_RE.fullmatch(scope):
            raise ValueError(f"timing scope: must be 32 hex digits, but got {scope!r}.")
        self._dir = (root or Path(tempfile.gettempdir()) / CACHE_DIR) / scope

    def get(self, sig: str) -> dict[str, Any] | None:
        try:
            return dict(json.loads((self._dir / f"{sig}.json").read_text()))
        except (OSError, ValueError):
            return None

    def put(self, sig: str, entry: Mapping[str, Any]) -> None:
        self._dir.mkdir(parents=True, exist_ok=True)
        tmp = self._dir / f".{sig}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(entry))
        tmp.replace(self._dir / f"{sig}.json")  # atomic: a reader sees all of it or nothing


def new_scope() -> str:
    return uuid.uuid4().hex


def forget_scope(scope: str, cache_dir: Path | None = None) -> None:
    """Remove this machine's files of a study's timing scope (the study's driver calls it when
    its run ends: by then every timing is in the study's storage, which a resume reads)."""
    if _SCOPE_RE.fullmatch(scope or ""):
        shutil.rmtree((cache_dir or Path(tempfile.gettempdir()) / CACHE_DIR) / scope,
                      ignore_errors=True)


def step_timer_for(trainer: Any) -> type:
    """The step timer for a trainer: ``StepTimer`` of the trainer's module when it defines one
    (`tuner.testing`'s fakes do), else `trainers.loop.StepTimer`."""
    fn = getattr(trainer, "func", trainer)  # a functools.partial of a trainer
    found = getattr(sys.modules.get(getattr(fn, "__module__", "") or ""), "StepTimer", None)
    if isinstance(found, type):
        return found
    from trainers.loop import StepTimer as Real

    return Real
