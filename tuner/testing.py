"""Fake trainers with `trainers.train`'s signature that finish at once, for orchestration tests.

Their val_loss is a smooth function of the recipe (best near lr = 3e-3), so samplers and ASHA
have something to rank, and the same recipe always gives the same numbers. They live in the
package (like ``optuna.testing``) so Ray workers can import them, and the CLI and the service
can run them: ``moetune submit search_spaces/quickstart.toml --trainer
tuner.testing:shaped_train`` (``moetune serve --trainer ...`` alike). `shaped_train` reports the
``debug`` proxy's peak memory; `quick_train` reports 1 GiB for every recipe, above quickstart's
``max_peak_memory_gb``, so every quickstart trial would end infeasible with it.

`StepTimer` is their step timer (`tuner.study.trial.timing.step_timer_for` finds it in this
module): a study with a timed metric run with these trainers gets timings at once, from
`step_seconds`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
import random
import time
from pathlib import Path
from typing import Any

import torch

from trainers import ModelArgs, Recipe, TrainResult
from trainers.loop import StepTime


def loss_of(recipe: Recipe) -> float:
    return 2.0 + (math.log10(recipe.lr) - math.log10(3e-3)) ** 2 + 0.5 * recipe.warmup_fraction


def make_result(recipe: Recipe, *, token_budget: int, val_loss: float, diverged: bool = False,
                curve: list[tuple[int, float]] | None = None, **overrides: Any) -> TrainResult:
    fields: dict[str, Any] = dict(
        val_loss=val_loss, eval_curve=curve or [(token_budget, val_loss)],
        train_curve=[(i * 1000, val_loss + 0.1) for i in range(1, 6)],
        tokens_trained=token_budget, token_budget=token_budget, steps=10,
        tokens_per_s=1e4 * (1 + recipe.warmup_fraction), train_time_s=0.01,
        peak_memory_bytes=2**30, peak_memory_method="cpu_accounting", activation_bytes=2**20,
        max_vio_batch=0.2, max_vio_val=0.1, loss_spikes=0, loss_spike_steps=[],
        grad_norm_mean=1.0, grad_norm_max=2.0, diverged=diverged,
        diverged_step=7 if diverged else None, stopped_early=False, precision=recipe.precision,
        fp8_emulated=None, seed=recipe.seed, corpus_hash="fake", n_params=1000,
        n_active_params=500)
    fields.update(overrides)
    return TrainResult(**fields)


def quick_train(model_args: ModelArgs, recipe: Recipe, *, data: Any = None, token_budget: int,
                seed: int | None = None, on_eval: Any = None, eval_every_tokens: int | None = None,
                device: Any = None, seconds_per_eval: float = 0.0,
                step_gate: Any = None) -> TrainResult:
    """Reports a val_loss at every evaluation point, each a bit lower, then returns. The wait
    before each evaluation (``seconds_per_eval``) is its "step", inside ``step_gate``."""
    target = loss_of(recipe)
    every = eval_every_tokens or token_budget
    curve = []
    for tokens in range(every, token_budget + 1, every):
        with (step_gate or contextlib.nullcontext)():
            time.sleep(seconds_per_eval)
        loss = target + (token_budget - tokens) / token_budget
        curve.append((tokens, loss))
        if on_eval is not None and on_eval(tokens, {"val_loss": loss, "train_loss": loss + 0.1,
                                                    "max_vio": 0.1, "step": tokens // 100,
                                                    "tokens_per_s": 1e4}) == "stop":
            break
    return make_result(recipe, token_budget=token_budget, val_loss=curve[-1][1], curve=curve)


def step_seconds(recipe: Recipe, n_seqs: int) -> float:
    """The fake seconds of one step: 2 ms plus 1 ms per 128-token sequence, × 0.8 for bf16 and
    × 1.6 for fp8 (emulated), × (1 + ratio / 3) for checkpointing (recompute)."""
    per_seq = {"fp32": 1.0, "bf16": 0.8, "fp8": 1.6}[recipe.precision] * 1e-3
    per_seq *= (1 + recipe.checkpoint_ratio / 3) * recipe.seq_len / 128
    return 2e-3 + per_seq * n_seqs


class StepTimer:
    """`trainers.loop.StepTimer` for the fake trainers: `step_seconds` at once, no training."""

    def __init__(self, model_args: ModelArgs, recipe: Recipe, *, data: Any = None,
                 device: Any = None) -> None:
        self._recipe = recipe
        self.fp8_emulated = True if recipe.precision == "fp8" else None

    def step(self, n_seqs: int) -> StepTime:
        seconds = step_seconds(self._recipe, n_seqs)
        return StepTime(wall_s=seconds, cpu_s=seconds)


def proxy_peak_bytes(recipe: Recipe) -> int:
    """The ``debug`` proxy's peak memory at the recipe's final batch, as its exact CPU byte count
    comes out (0.0035 GiB per sequence in fp32 without recompute: 0.112 GiB at 32 sequences;
    × 0.7 in bf16; × (1 − 0.53 × checkpoint_ratio))."""
    per_seq = 0.0035 * (0.7 if recipe.precision == "bf16" else 1.0)
    return int(per_seq * recipe.batch_end * (1 - 0.53 * recipe.checkpoint_ratio) * 2**30)


def shaped_train(model_args: ModelArgs, recipe: Recipe, *, on_eval: Any = None,
                 **kw: Any) -> TrainResult:
    """`quick_train` shaped like the ``debug`` proxy in its systems knobs, to try
    ``search_spaces/quickstart.toml`` in seconds: val_loss rises by 0.1 per doubling of the
    final batch beyond 16 (fewer updates at equal tokens) and peak memory is
    `proxy_peak_bytes`, so the spec's memory limit and trade-off act as with the real trainer
    (its timing comes from `StepTimer`)."""
    offset = 0.1 * math.log2(recipe.batch_end / 16)

    def shifted(tokens: int, metrics: dict[str, Any]) -> Any:
        return on_eval(tokens, {**metrics, "val_loss": metrics["val_loss"] + offset})

    r = quick_train(model_args, recipe, on_eval=shifted if on_eval else None, **kw)
    return dataclasses.replace(r, val_loss=r.val_loss + offset,
                               eval_curve=[(t, v + offset) for t, v in r.eval_curve],
                               peak_memory_bytes=proxy_peak_bytes(recipe))


def width_train(model_args: ModelArgs, recipe: Recipe, *, token_budget: int,
                **kw: Any) -> TrainResult:
    """A fake whose val_loss depends on the model's width like a real proxy's: lower for wider
    models (+ 64 / dim), and with its best lr at 3e-3 under µP (``mup_base_dim`` set) but at
    3e-3 · 64 / dim without it (standard parametrization: the optimum moves with width)."""
    best_lr = 3e-3 if model_args.mup_base_dim else 3e-3 * 64 / model_args.dim
    loss = (2.0 + (math.log10(recipe.lr) - math.log10(best_lr)) ** 2
            + 0.5 * recipe.warmup_fraction + 64 / model_args.dim)
    return make_result(recipe, token_budget=token_budget, val_loss=loss)


# seed % 3 -> val_loss offset: seeds 0, 1, 2 of one recipe have a sample sd of exactly this
SEED_NOISE_SD = 0.02
_SEED_OFFSETS = (0.0, SEED_NOISE_SD, -SEED_NOISE_SD)


def seed_noise_train(model_args: ModelArgs, recipe: Recipe, *, token_budget: int,
                     seed: int | None = None, **kw: Any) -> TrainResult:
    """`quick_train` whose val_loss also depends on the seed: ``loss_of(recipe)`` plus
    0, +`SEED_NOISE_SD` or −`SEED_NOISE_SD` for ``seed % 3`` = 0, 1, 2, so any recipe trained
    with seeds 0, 1, 2 spreads with a sample sd of `SEED_NOISE_SD`."""
    loss = loss_of(recipe) + _SEED_OFFSETS[(seed or 0) % 3]
    return make_result(recipe, token_budget=token_budget, val_loss=loss, seed=seed or 0)


def rendezvous_train(model_args: ModelArgs, recipe: Recipe, *, token_budget: int,
                     seed: int | None = None, meet_dir: str, **kw: Any) -> TrainResult:
    """`seed_noise_train` that first marks itself started in ``meet_dir`` and waits (up to
    20 s) until another run has started there too: a run that met none reads val_loss inf,
    so a test sees whether two runs were in flight at once (bind ``meet_dir`` with
    functools.partial)."""
    here = Path(meet_dir)
    (here / f"{recipe.lr!r}-{seed}").touch()
    deadline = time.monotonic() + 20.0
    while len(list(here.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    if len(list(here.iterdir())) < 2:
        return make_result(recipe, token_budget=token_budget, val_loss=math.inf)
    return seed_noise_train(model_args, recipe, token_budget=token_budget, seed=seed)


def seed_2_crash_train(model_args: ModelArgs, recipe: Recipe, *, seed: int | None = None,
                       **kw: Any) -> TrainResult:
    """`seed_noise_train`, except that with seed 2 the worker process dies (`crash_train`)."""
    if seed == 2:
        os._exit(3)
    return seed_noise_train(model_args, recipe, seed=seed, **kw)


# Takes ~1 s per evaluation: long enough to kill a driver while trials are in flight.
slow_train = functools.partial(quick_train, seconds_per_eval=1.0)


def nan_train(model_args: ModelArgs, recipe: Recipe, **kw: Any) -> TrainResult:
    """A run that diverged: val_loss NaN, diverged=True (as trainers.train reports it)."""
    return make_result(recipe, token_budget=kw["token_budget"], val_loss=math.nan,
                       diverged=True)


def inf_train(model_args: ModelArgs, recipe: Recipe, **kw: Any) -> TrainResult:
    """val_loss inf without the diverged flag: still must not be recorded as a success."""
    return make_result(recipe, token_budget=kw["token_budget"], val_loss=math.inf)


def oom_train(model_args: ModelArgs, recipe: Recipe, **kw: Any) -> TrainResult:
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


def cpu_oom_train(model_args: ModelArgs, recipe: Recipe, **kw: Any) -> TrainResult:
    raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: not enough "
                       "memory: you tried to allocate 1073741824 bytes. out of memory")


def error_train(model_args: ModelArgs, recipe: Recipe, **kw: Any) -> TrainResult:
    raise ValueError("boom: the trainer hit a bug")


def memory_hog_train(model_args: ModelArgs, recipe: Recipe, **kw: Any) -> TrainResult:
    """Finishes fine but uses 8 GiB: violates a max_peak_memory_gb = 4 constraint."""
    return make_result(recipe, token_budget=kw["token_budget"], val_loss=loss_of(recipe),
                       peak_memory_bytes=8 * 2**30)


def crash_train(model_args: ModelArgs, recipe: Recipe, **kw: Any) -> TrainResult:
    """The worker process dies (as when the OS kills it): nothing is reported back."""
    os._exit(3)


def hang_train(model_args: ModelArgs, recipe: Recipe, **kw: Any) -> TrainResult:
    """Never returns and never reports (a trial stuck in a deadlock): only the study's
    ``resources.trial_timeout_s`` ends it."""
    while True:
        time.sleep(1.0)


# A known law: the optimum moves with the token budget D as lr* = 3e-3·(D/1e5)^LAW_LR_EXPONENT
# and B* = 1024·(D/1e5)^LAW_BATCH_EXPONENT tokens per step, so a law study's fit can be checked
# against the exponents it should recover.
LAW_LR_EXPONENT = -0.2
LAW_BATCH_EXPONENT = 0.3
LAW_NOISE_SD = 0.01


def law_optimum(tokens: float) -> tuple[float, float]:
    """`law_train`'s true (lr*, B* in tokens) at a budget of ``tokens``."""
    return (3e-3 * (tokens / 1e5) ** LAW_LR_EXPONENT,
            1024.0 * (tokens / 1e5) ** LAW_BATCH_EXPONENT)


def law_train(model_args: ModelArgs, recipe: Recipe, *, token_budget: int,
              seed: int | None = None, on_eval: Any = None, **kw: Any) -> TrainResult:
    """A fake whose val_loss is a bowl in log lr and log batch around `law_optimum` of its
    budget, plus noise of sd `LAW_NOISE_SD` drawn from the recipe and the seed (the same run
    always gives the same number, another seed another)."""
    lr_star, _ = law_optimum(token_budget)
    return _law_bowl(recipe, lr_star, token_budget=token_budget, seed=seed, on_eval=on_eval)


def _law_bowl(recipe: Recipe, lr_star: float, *, token_budget: int, seed: int | None,
              on_eval: Any) -> TrainResult:
    """The known-law fakes' val_loss: a bowl in log lr around ``lr_star`` and in log batch
    around the budget's `law_optimum` batch, plus seeded noise of sd `LAW_NOISE_SD`."""
    _, b_star = law_optimum(token_budget)
    batch = recipe.batch_end * recipe.seq_len
    noise = random.Random(f"{recipe.lr!r}|{batch}|{seed}|{token_budget}").gauss(0.0,
                                                                               LAW_NOISE_SD)
    loss = (2.0 + 1.5 / math.log10(token_budget) + (math.log10(recipe.lr / lr_star)) ** 2
            + 0.5 * (math.log10(batch / b_star)) ** 2 + noise)
    if on_eval is not None:
        on_eval(token_budget, {"val_loss": loss, "train_loss": loss + 0.1, "max_vio": 0.1,
                               "step": 10, "tokens_per_s": 1e4})
    return make_result(recipe, token_budget=token_budget, val_loss=loss, seed=seed or 0)


# A known law in tokens and batch: log10 lr*(D, B) = log10 3e-3 + a·u + b·v + c·u·v with
# u = log10(D / 1e5), v = log10(B / 1024) (B tokens per step), (a, b, c) = LAW_LR_BATCH: the
# form `tuner.modeling.laws.lr_batch_law` fits, so a law study over a grid of budgets and batches
# can be checked against the lr*(D, B) it should recover. The D-exponent at a fixed batch, a + c·v,
# moves with the batch, as it does in Step Law's sweep (arXiv:2503.04715).
LAW_LR_BATCH = (-0.2, 0.4, 0.1)


def law_lr_batch_optimum(tokens: float, batch: float) -> float:
    """`law_batch_train`'s true lr* at ``tokens`` trained with ``batch`` tokens per step."""
    a, b, c = LAW_LR_BATCH
    u, v = math.log10(tokens / 1e5), math.log10(batch / 1024.0)
    return 3e-3 * 10 ** (a * u + b * v + c * u * v)


def law_batch_train(model_args: ModelArgs, recipe: Recipe, *, token_budget: int,
                    seed: int | None = None, on_eval: Any = None, **kw: Any) -> TrainResult:
    """`law_train` whose lr bowl at each batch sits at `law_lr_batch_optimum` of its budget and
    that batch (the batch's own optimum, and its penalty, as `law_train`'s)."""
    lr_star = law_lr_batch_optimum(token_budget, recipe.batch_end * recipe.seq_len)
    return _law_bowl(recipe, lr_star, token_budget=token_budget, seed=seed, on_eval=on_eval)


# lr -> behaviour, so one study (with these lr values enqueued) exercises every outcome.
BY_LR = {1e-4: nan_train, 2e-4: inf_train, 3e-4: oom_train, 4e-4: cpu_oom_train,
         5e-4: error_train, 6e-4: memory_hog_train, 7e-4: crash_train, 8e-4: hang_train}


def mixed_train(model_args: ModelArgs, recipe: Recipe, **kw: Any) -> TrainResult:
    """Behaves like ``BY_LR[recipe.lr]`` (a healthy `quick_train` for any other lr)."""
    return BY_LR.get(recipe.lr, quick_train)(model_args, recipe, **kw)
