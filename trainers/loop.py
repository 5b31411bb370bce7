"""One proxy training: `train(model_args, recipe, token_budget=...) -> TrainResult`.

Every run consumes the same `token_budget` tokens (rounded down to whole sequences), so recipes
are compared on equal data; the batch schedule changes the number of steps, not the data. The LR
is a function of tokens seen. After every optimizer step each MoE gate's balancing bias moves by
γ toward balance (aux-loss-free balancing). A NaN/inf loss ends the run as a *result*
(`diverged=True`), not an exception.

`StepTimer` times single steps of this same loop at a chosen batch size, for a cost measured
apart from a quality run; `step_gate` lets a caller hold a lock around each step's computation,
so that such a timing can have the machine's cores to itself.
"""

from __future__ import annotations

import contextlib
import copy
import math
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import torch

from trainers.config.model_args import ModelArgs
from trainers.config.recipe import Recipe
from trainers.config.schedules import batch_size_at, lr_at
from trainers.data import Blend, Corpus, Data, TrainStream, load_corpus, validation_batches
from trainers.memory import SavedActivationMeter, training_state_bytes
from trainers.nn import attention, fusion
from trainers.nn.fp8 import Backend, fp8_backend
from trainers.nn.model import ModelOutput, Transformer
from trainers.nn.moe import max_vio, max_vio_tensor
from trainers.nn.mup import param_groups
from trainers.presets import count_params
from trainers.result import MemoryMethod, TrainResult, thin_curve

OnEval = Callable[[int, dict[str, float]], Any]
# entered around every optimizer step and every evaluation's computation (not around on_eval)
StepGate = Callable[[], contextlib.AbstractContextManager[Any]]
SPIKE_WARMUP_STEPS = 10  # the running mean needs some steps before a spike means anything
SPIKE_EMA = 0.9


def train(model_args: ModelArgs, recipe: Recipe, *, data: Data | str | Path | None = None,
          token_budget: int, seed: int | None = None, on_eval: OnEval | None = None,
          eval_every_tokens: int | None = None, eval_sequences: int = 64,
          device: str | torch.device | None = None,
          step_gate: StepGate | None = None) -> TrainResult:
    """Train `model_args` with `recipe` on `token_budget` tokens and measure the outcome.

    Args:
        data: a `Corpus` or `Blend`, a spec for `load_corpus`, or None for the stdlib corpus.
        token_budget: training tokens; rounded down to a whole number of sequences.
        seed: overrides `recipe.seed` (model init and data order).
        on_eval: called as on_eval(tokens_seen, metrics) at each evaluation; returning "stop"
            ends the run early (`TrainResult.stopped_early`).
        eval_every_tokens: evaluation interval (default: a tenth of the budget).
        eval_sequences: held-out sequences per evaluation (fixed across runs).
        device: default CUDA when available, else CPU.
        step_gate: called for a context entered around every optimizer step and the
            computation of every evaluation (``on_eval`` runs outside it): a caller that shares
            the machine's cores passes a lock here, so that another process can pause this run
            at a step boundary (None: nothing around the steps).

    Returns:
        TrainResult with val_loss, curves, throughput, memory, balance and stability figures.

    Raises:
        ValueError: bad budget/interval, a corpus too small or with a larger vocabulary than
            the model.
    """
    run = _Run.start(model_args, recipe, data, token_budget, seed, eval_every_tokens,
                     eval_sequences, device)
    if step_gate is not None:
        run.gate = step_gate
    while run.tokens < run.budget and not run.diverged and not run.stopped_early:
        with run.gate():
            run.step()
        if run.tokens >= run.next_eval or run.tokens >= run.budget:
            run.evaluate(on_eval)
    return run.result()


class StepTimer:
    """Optimizer steps of `train`'s own loop, timed one by one, at batch sizes the caller chooses.

    The same model, optimizer, precision, checkpointing and micro-batching as a training run
    with ``recipe``, stepped through the same `_Run.step`; only the batch size of each step is
    the caller's (``step(n_seqs)``), so a cost can be timed per batch size apart from a quality
    run. The token budget is so large that the learning rate stays in its warmup near zero: the
    weights barely move, and no timing run diverges. ``fp8_emulated`` says whether fp8 GEMMs
    are emulated (their speed is then not fp8's).
    """

    BUDGET = 1 << 50  # tokens: never reached; keeps lr_at in its warmup

    def __init__(self, model_args: ModelArgs, recipe: Recipe, *,
                 data: Data | str | Path | None = None,
                 device: str | torch.device | None = None) -> None:
        self._run = _Run.start(model_args, recipe, data, self.BUDGET // recipe.seq_len
                               * recipe.seq_len, None, None, 1, device)
        self.fp8_emulated = None if self._run.fp8 is None else self._run.fp8 == "emulated"
        self.device = str(self._run.device)

    def step(self, n_seqs: int) -> StepTime:
        """One optimizer step on ``n_seqs`` sequences, timed (on CUDA, from an idle device to
        the step's last kernel)."""
        cuda = self._run.device.type == "cuda"
        if cuda:
            torch.cuda.synchronize(self._run.device)
        t0, c0 = time.perf_counter(), time.thread_time()
        self._run.step(n_seqs)
        if cuda:
            torch.cuda.synchronize(self._run.device)
        return StepTime(wall_s=time.perf_counter() - t0, cpu_s=time.thread_time() - c0)


class StepTime(NamedTuple):
    """One timed step: wall-clock seconds, and CPU seconds of the calling thread (on a CPU with
    one torch thread, where forward, backward and optimizer all run, that is the step's whole
    computation, however many other processes take turns on the core)."""

    wall_s: float
    cpu_s: float


@dataclass
class _Run:
    """State of one training run; `train` is the loop, this holds what the loop touches."""

    args: ModelArgs
    recipe: Recipe
    corpus: Data
    seed: int
    device: torch.device
    model: Transformer
    optimizer: torch.optim.Optimizer
    stream: TrainStream
    val_batches: list[torch.Tensor]
    budget: int
    eval_every: int
    meter: SavedActivationMeter
    fp8: Backend | None  # the back end of fp8 GEMMs; None unless precision is fp8
    fp8_note: str
    tokens: int = 0
    steps: int = 0
    next_eval: int = 0
    train_time: float = 0.0
    diverged: bool = False
    diverged_step: int | None = None
    stopped_early: bool = False
    train_curve: list[tuple[int, float]] = field(default_factory=list)
    eval_curve: list[tuple[int, float]] = field(default_factory=list)
    grad_norms: list[float] = field(default_factory=list)
    batch_vios: list[float] = field(default_factory=list)
    val_vio: float = 0.0
    spike_steps: list[int] = field(default_factory=list)
    loss_ema: float | None = None
    metered_batch: int = 0  # the largest micro-batch the saved-tensor meter has measured (CUDA)
    snapshot: tuple[dict, dict] | None = None
    gate: StepGate = contextlib.nullcontext

    @classmethod
    def start(cls, args: ModelArgs, recipe: Recipe, data: Data | str | Path | None,
              token_budget: int, seed: int | None, eval_every_tokens: int | None,
              eval_sequences: int, device: str | torch.device | None) -> _Run:
        corpus = data if isinstance(data, (Corpus, Blend)) else load_corpus(data)
        budget = _check_budget(token_budget, recipe.seq_len)
        eval_every = _check_eval_every(eval_every_tokens, budget)
        if corpus.vocab_size > args.vocab_size:
            raise ValueError(f"train: corpus {corpus.name!r} has vocab_size={corpus.vocab_size}"
                             f", larger than ModelArgs.vocab_size={args.vocab_size}.")
        seed = recipe.seed if seed is None else seed
        device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        fp8, fp8_note = fp8_backend(device) if recipe.precision == "fp8" else (None, "")
        # builds (first use on this machine) or loads the CPU attention kernel now, so that
        # neither lands in the timed steps' tokens/s
        attention.cpu_kernel(device.type, recipe.seq_len)
        torch.manual_seed(seed)
        if device.type == "cuda":  # the peak we report must be this run's, not the process's
            torch.cuda.reset_peak_memory_stats(device)
        model = Transformer(args).to(device)
        model.set_precision(fp8=fp8)
        model.set_checkpointing(recipe.checkpoint_ratio)
        if device.type == "cuda" and fusion.mode() == "blocks" and fp8 is None:
            model.compile_blocks()
        model.train()
        # fused: one kernel over all parameters (CPU and CUDA), ~3x the per-tensor loop's speed
        # at proxy sizes; same update up to float rounding
        optimizer = torch.optim.AdamW(
            param_groups(model, args, weight_decay=recipe.weight_decay), lr=recipe.lr,
            betas=(recipe.beta1, recipe.beta2), eps=1e-8, fused=True)
        return cls(
            args=args, recipe=recipe, corpus=corpus, seed=seed, device=device, model=model,
            optimizer=optimizer, stream=TrainStream(corpus, recipe.seq_len, seed),
            val_batches=validation_batches(corpus, recipe.seq_len, eval_sequences,
                                           batch=min(eval_sequences, 16)),
            budget=budget, eval_every=eval_every, meter=SavedActivationMeter(model),
            fp8=fp8, fp8_note=fp8_note,
            next_eval=eval_every)

    # one optimizer step ---------------------------------------------------------------------
    def step(self, n_seqs: int | None = None) -> None:
        """One step of the batch the schedule gives (``n_seqs``: of that many sequences)."""
        r = self.recipe
        if n_seqs is None:
            n_seqs = min(batch_size_at(r, self.tokens, self.budget),
                         (self.budget - self.tokens) // r.seq_len)
        lr = lr_at(r, self.tokens, self.budget)
        for group in self.optimizer.param_groups:
            group["lr"] = lr * group["lr_mult"]
        batch = self.stream.next_batch(n_seqs).to(self.device)
        t0 = time.perf_counter()
        ces, loads = self._forward_backward(batch)
        grad_norm_t = self._clip()
        # the step's one read-back: losses, gradient norm and each MoE layer's MaxVio together
        # (one host synchronisation instead of one per figure; same float32 values)
        figures = torch.stack([*(ce for ce, _ in ces), grad_norm_t.float(),
                               *(max_vio_tensor(x) for x in loads)]).tolist()
        loss = sum(v * share for v, (_, share) in zip(figures, ces))
        grad_norm, vios = figures[len(ces)], figures[len(ces) + 1:]
        self.tokens += n_seqs * r.seq_len
        self.steps += 1
        if not (math.isfinite(loss) and math.isfinite(grad_norm)):
            self.diverged, self.diverged_step = True, self.steps
            self.train_curve.append((self.tokens, loss))
            return
        if self._is_spike(loss) and r.spike_policy != "record":
            self.optimizer.zero_grad(set_to_none=True)
            if r.spike_policy == "rollback" and self.snapshot is not None:
                self.model.load_state_dict(self.snapshot[0])
                self.optimizer.load_state_dict(self.snapshot[1])
        else:
            self.optimizer.step()
            self._update_gate_bias(loads)
        self.train_time += time.perf_counter() - t0
        self.train_curve.append((self.tokens, loss))
        self.grad_norms.append(grad_norm)
        self.batch_vios.append(sum(vios) / max(1, len(loads)))

    def _forward_backward(self, batch: torch.Tensor
                          ) -> tuple[list[tuple[torch.Tensor, float]], list[torch.Tensor]]:
        """Gradient accumulation over micro-batches; returns each micro-batch's main next-token
        loss (a 0-dim tensor, not read back) with its share of the batch, and the loads."""
        self.optimizer.zero_grad(set_to_none=True)
        micro = self.recipe.micro_batch or len(batch)
        ces: list[tuple[torch.Tensor, float]] = []
        loads = None
        for chunk in batch.split(micro):
            with self._autocast(), self._measure(len(chunk)):
                out = self.model(chunk[:, :-1])
                loss, ce = self._loss(out, chunk[:, 1:])
            (loss * (len(chunk) / len(batch))).backward()
            ces.append((ce.detach(), len(chunk) / len(batch)))
            chunk_loads = [x.float() for x in out.loads]
            loads = chunk_loads if loads is None else [a + b for a, b in zip(loads, chunk_loads)]
        return ces, loads or []

    def _measure(self, micro_batch: int) -> contextlib.AbstractContextManager[Any]:
        """The saved-tensor meter around a forward. On CUDA the allocator's peak is the memory
        figure and the meter only fills `activation_bytes`, which depends on the micro-batch's
        shape alone: it runs once per new largest micro-batch there, not every step (its
        Python hook runs for every tensor autograd saves)."""
        if self.device.type == "cuda":
            if micro_batch <= self.metered_batch:
                return contextlib.nullcontext()
            self.metered_batch = micro_batch
        return self.meter.measure()

    def _loss(self, out: ModelOutput, targets_BT: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """L = CE + λ/D Σ_k CE_k (MTP) + α · balance; returns (L, main CE)."""
        r = self.recipe
        ce = self.model.head_loss(out.hidden, targets_BT)
        loss = ce + r.balance_loss_alpha * out.balance_loss
        if out.mtp_hidden:
            mtp = sum(self.model.head_loss(h, targets_BT[:, k:])
                      for k, h in enumerate(out.mtp_hidden, start=1))
            loss = loss + r.mtp_lambda / len(out.mtp_hidden) * mtp
        return loss, ce

    def _clip(self) -> torch.Tensor:
        clip = self.recipe.grad_clip or float("inf")
        return torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)

    def _is_spike(self, loss: float) -> bool:
        spike = (self.loss_ema is not None and self.steps > SPIKE_WARMUP_STEPS
                 and loss > self.recipe.spike_factor * self.loss_ema)
        if spike:
            self.spike_steps.append(self.steps)
        else:
            self.loss_ema = loss if self.loss_ema is None else (
                SPIKE_EMA * self.loss_ema + (1 - SPIKE_EMA) * loss)
        return spike

    @torch.no_grad()
    def _update_gate_bias(self, loads: list[torch.Tensor]) -> None:
        """b_i += γ · sign(mean load − load_i): overloaded experts become less attractive."""
        for gate, load in zip(self.model.moe_gates(), loads):
            if gate.bias is not None:
                gate.bias += self.recipe.bias_update_speed * torch.sign(load.mean() - load)

    def _autocast(self):
        if self.recipe.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    # evaluation -----------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, on_eval: OnEval | None) -> None:
        self.next_eval = (self.tokens // self.eval_every + 1) * self.eval_every
        if self.diverged:
            return
        self.model.eval()
        total, loads = 0.0, None
        with self.gate():
            for batch in self.val_batches:
                with self._autocast():
                    out = self.model(batch[:, :-1].to(self.device), mtp=False)
                total += (self.model.head_loss(out.hidden, batch[:, 1:].to(self.device)).item()
                          * len(batch))
                batch_loads = [x.float() for x in out.loads]
                loads = (batch_loads if loads is None
                         else [a + b for a, b in zip(loads, batch_loads)])
        self.model.train()
        val_loss = total / sum(len(b) for b in self.val_batches)
        self.val_vio = sum(max_vio(x) for x in loads or []) / max(1, len(loads or []))
        if not math.isfinite(val_loss):
            self.diverged, self.diverged_step = True, self.steps
            return
        self.eval_curve.append((self.tokens, val_loss))
        if self.recipe.spike_policy == "rollback":
            self.snapshot = (copy.deepcopy(self.model.state_dict()),
                             copy.deepcopy(self.optimizer.state_dict()))
        if on_eval is not None:
            metrics = {"val_loss": val_loss, "train_loss": self.train_curve[-1][1],
                       "max_vio": self.val_vio, "step": self.steps,
                       "tokens_per_s": self.tokens_per_s}
            if on_eval(self.tokens, metrics) == "stop":
                self.stopped_early = True

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.train_time if self.train_time > 0 else 0.0

    # result ---------------------------------------------------------------------------------
    def result(self) -> TrainResult:
        peak, method = self._peak_memory()
        total, active = count_params(self.args)
        norms = self.grad_norms or [float("nan")]
        return TrainResult(
            val_loss=float("inf") if self.diverged or not self.eval_curve
            else self.eval_curve[-1][1],
            eval_curve=self.eval_curve, train_curve=thin_curve(self.train_curve),
            tokens_trained=self.tokens, token_budget=self.budget, steps=self.steps,
            tokens_per_s=self.tokens_per_s, train_time_s=self.train_time,
            peak_memory_bytes=peak, peak_memory_method=method,
            activation_bytes=self.meter.peak_bytes,
            max_vio_batch=sum(self.batch_vios) / max(1, len(self.batch_vios)),
            max_vio_val=self.val_vio, loss_spikes=len(self.spike_steps),
            loss_spike_steps=self.spike_steps, grad_norm_mean=sum(norms) / len(norms),
            grad_norm_max=max(norms), diverged=self.diverged, diverged_step=self.diverged_step,
            stopped_early=self.stopped_early, precision=self.recipe.precision,
            fp8_emulated=None if self.fp8 is None else self.fp8 == "emulated",
            seed=self.seed, corpus_hash=self.corpus.hash, n_params=total,
            n_active_params=active, environment=self._environment())

    def _peak_memory(self) -> tuple[int, MemoryMethod]:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device), "cuda_allocator"
        state = training_state_bytes(self.model, self.optimizer)
        return state + self.meter.peak_bytes, "cpu_accounting"

    def _environment(self) -> dict[str, Any]:
        env = {"torch": torch.__version__, "python": platform.python_version(),
               "device": str(self.device), "threads": torch.get_num_threads(),
               "machine": platform.machine(), "corpus": self.corpus.name,
               "attention": attention.describe(self.device.type, self.recipe.seq_len)}
        if self.device.type == "cuda":
            env["gpu"] = torch.cuda.get_device_name(self.device)
            env["fusion"] = fusion.note()
        if self.fp8_note:
            env["fp8_backend"] = self.fp8_note
        return env


def _check_budget(token_budget: int, seq_len: int) -> int:
    if not isinstance(token_budget, int) or isinstance(token_budget, bool) or token_budget <= 0:
        raise ValueError(f"train: token_budget must be a positive integer, but got "
                         f"token_budget={token_budget!r}.")
    if token_budget < seq_len:
        raise ValueError(f"train: token_budget must hold at least one sequence "
                         f"(seq_len={seq_len}), but got token_budget={token_budget}.")
    return token_budget // seq_len * seq_len


def _check_eval_every(eval_every: int | None, budget: int) -> int:
    if eval_every is None:
        return max(1, budget // 10)
    if not isinstance(eval_every, int) or isinstance(eval_every, bool) or eval_every <= 0:
        raise ValueError(f"train: eval_every_tokens must be a positive integer, but got "
                         f"eval_every_tokens={eval_every!r}.")
    return eval_every
