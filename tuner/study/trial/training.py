"""One proxy training: what it is (`Training`) and the one function that runs it (`run_training`).

Every training moetune runs goes through `run_training`: a study's trials
(`tuner.study.trial.trainable`), the noise re-trainings (`tuner.study.results.noise`, in this
process or as Ray tasks), `moetune rerun` (`tuner.study.workflows.rerun`) and `moetune validate`
(`tuner.study.workflows.validate`). It sets torch's threads from ``cpus`` (and puts them back),
picks the device (`device_for`, the one rule), loads the corpus
(`tuner.corpus.section.load_data`, as `check_inputs` does), calls the trainer with the
machine's cores gate (`cores.gate_for`) and turns how it ended into a `Trained`: an
out-of-memory error is ``oom``, any other exception ``error``, each with its `Reason` and the
exception itself; only Ctrl-C (KeyboardInterrupt) and
SystemExit pass through. Each caller says what a failure means for it: a trial reports it, a
noise re-training records it on the run, rerun and validate raise it (`Trained.result_or_raise`).

A `Training` is what a Ray worker receives, and all it receives besides the trainer: the model
and recipe as dicts, the ``[data]`` section, the budget, the seed and the resources. It has no
field for a storage URL or anything else from ``[study]``, so a password in the study's
storage URL cannot travel to a worker through it (`tests/tuner/test_training.py`).

    >>> device_for(Training(model_args={}, recipe={}, data=DataSection(), token_budget=1,
    ...                     seed=0, device="cpu"))
    'cpu'
"""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from trainers import ModelArgs, Recipe, TrainResult
from trainers.config.validation import require
from tuner.corpus.documents import CorpusError
from tuner.corpus.section import load_data
from tuner.study.results.reasons import Reason, exception_reason
from tuner.study.specs.data_spec import DataSection, spec_error
from tuner.study.trial.cores import gate_for

if TYPE_CHECKING:  # the spec module loads Optuna, which a Ray worker does without
    from tuner.study.specs.spec import StudySpec

Trainer = Callable[..., TrainResult]
OnEval = Callable[[int, dict[str, Any]], Any]
# called with (model_args, recipe, data, device) once the corpus is loaded, before the trainer
# (a trial times its systems signature there); an exception in it ends the training like one
# in the trainer
BeforeTrain = Callable[[ModelArgs, Recipe, Any, str], None]
TRACEBACK_LINES = 8
ERROR_CHARS = 300


@dataclass(frozen=True, kw_only=True)
class Training:
    """One proxy training, everything a process needs to run it and nothing more.

    ``recipe`` is `Recipe.to_dict`'s form; a study's trials share one `Training` whose recipe is
    empty, and each trial puts its own in (`dataclasses.replace`).
    """

    model_args: dict[str, Any]  # `ModelArgs.to_dict`'s form
    recipe: dict[str, Any]
    # the spec's [data]: "stdlib" or absolute paths (a worker runs in Ray's trial folder, where
    # a relative path would name nothing); its size limit is checked again on every load,
    # since a folder may have grown since the spec check
    data: DataSection
    token_budget: int
    seed: int  # overrides the recipe's seed (model init and data order)
    eval_every_tokens: int | None = None  # None: the trainer's own (a tenth of the budget)
    # torch threads: int(cpus), at least 1, put back afterwards; None: this process's as they
    # are (a command's own process, with its cores)
    cpus: float | None = None
    gpus: float = 0.0  # > 0: CUDA when this machine has it, else CPU
    device: str = ""  # a device to use whatever ``gpus`` says ("cpu", "cuda"); "": the rule

    def __post_init__(self) -> None:
        require(self.token_budget > 0, "token_budget", "must be > 0", self.token_budget)
        require(self.cpus is None or self.cpus > 0, "cpus", "must be > 0 or None", self.cpus)
        require(self.gpus >= 0, "gpus", "must be >= 0", self.gpus)

    @property
    def threads(self) -> int | None:
        """The torch thread count the training runs with (None: left as it is)."""
        return None if self.cpus is None else max(1, int(self.cpus))


def study_training(spec: StudySpec, *, model_args: dict[str, Any],
                   recipe: dict[str, Any] | None = None, seed: int | None = None) -> Training:
    """A training as study ``spec`` trains its trials: its corpus, token budget, evaluation
    interval and per-trial cores and GPUs; ``seed`` the study's unless given. A study's trials
    share the one with no recipe; a noise re-training and ``rerun`` give a trial's (``rerun``
    then sets its own threads and device with `dataclasses.replace`)."""
    return Training(model_args=model_args, recipe=dict(recipe or {}), data=spec.data,
                    token_budget=spec.budget.tokens_per_trial,
                    eval_every_tokens=spec.budget.eval_every_tokens,
                    seed=spec.study.seed if seed is None else seed,
                    cpus=spec.resources.cpus_per_trial, gpus=spec.resources.gpus_per_trial)


@dataclass(frozen=True, kw_only=True)
class Trained:
    """How one training ended: ``ok`` with its result, or ``oom`` / ``error`` with why."""

    status: Literal["ok", "oom", "error"]
    device: str
    result: TrainResult | None = None
    # oom: kind out_of_memory, the error's first line; error: kind exception, the traceback's
    # last lines (`TRACEBACK_LINES`)
    reason: Reason | None = None
    error: str = ""  # "Type: message", at most ERROR_CHARS characters; "" when ok
    corpus_hash: str | None = None  # None when the corpus did not load
    exception: BaseException | None = dataclasses.field(default=None, compare=False,
                                                        repr=False)

    def result_or_raise(self) -> TrainResult:
        """The result; the exception the training raised when it did not end ``ok``."""
        if self.exception is not None:
            raise self.exception
        assert self.result is not None, "a training that raised nothing has a result"
        return self.result


def run_training(training: Training, *, trainer: Trainer, on_eval: OnEval | None = None,
                 before_train: BeforeTrain | None = None) -> Trained:
    """Run ``training`` with ``trainer`` (`trainers.train`'s signature) in this process.

    Args:
        on_eval: passed to the trainer (None: none passed).
        before_train: called with the parsed model and recipe, the loaded corpus and the
            device, before the trainer.

    Returns:
        A `Trained`; every exception but KeyboardInterrupt and SystemExit ends up there.
    """
    import torch  # only here: noise's tie rules import this module in light commands

    device = device_for(training)
    threads_before = torch.get_num_threads()
    if training.threads is not None:
        torch.set_num_threads(training.threads)  # Ray sets OMP's; torch's intra-op pool too
    corpus_hash = None
    try:
        model_args = ModelArgs.from_dict(training.model_args)
        recipe = Recipe.from_dict(training.recipe)
        data = _corpus(training.data)
        corpus_hash = data.hash
        if before_train is not None:
            before_train(model_args, recipe, data, device)
        optional = {"on_eval": on_eval, "eval_every_tokens": training.eval_every_tokens}
        result = trainer(model_args, recipe, data=data, token_budget=training.token_budget,
                         seed=training.seed, device=device, **gate_for(trainer),
                         **{k: v for k, v in optional.items() if v is not None})
    except BaseException as e:  # noqa: B036 - every way out is recorded or passed on
        return failed(e, device=device, corpus_hash=corpus_hash)
    finally:
        torch.set_num_threads(threads_before)
    return Trained(status="ok", device=device, result=result, corpus_hash=corpus_hash)


def _corpus(data: DataSection) -> Any:
    """The corpus, as the spec's input check loads it; its error is the spec's, naming the
    ``[data]`` key (a folder may have changed since the check)."""
    try:
        return load_data(data)
    except CorpusError as e:
        raise spec_error(e) from None


def failed(e: BaseException, *, device: str, corpus_hash: str | None) -> Trained:
    """The one error policy: out of memory → ``oom``, another exception → ``error``, both
    recorded with the exception; KeyboardInterrupt and SystemExit are raised again."""
    error = f"{type(e).__name__}: {e}"[:ERROR_CHARS]
    if is_out_of_memory(e):
        return Trained(status="oom", device=device, corpus_hash=corpus_hash, error=error,
                       reason=Reason(kind="out_of_memory", detail=_one_line(e)), exception=e)
    if isinstance(e, (KeyboardInterrupt, SystemExit)):
        raise e
    return Trained(status="error", device=device, corpus_hash=corpus_hash, error=error,
                   reason=exception_reason(traceback_tail(e)), exception=e)


def device_for(training: Training) -> str:
    """The device a training runs on: its ``device`` when set; else CUDA when it has GPUs
    (``gpus`` > 0) and this machine has CUDA; else CPU."""
    if training.device:
        return training.device
    import torch  # only here, as in run_training

    return "cuda" if training.gpus > 0 and torch.cuda.is_available() else "cpu"


def is_out_of_memory(e: BaseException) -> bool:
    """CUDA's OutOfMemoryError, Python's MemoryError, or a RuntimeError saying so (CPU alloc)."""
    import torch  # only here, as in run_training

    if isinstance(e, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(e, RuntimeError) and "out of memory" in str(e).lower()


def traceback_tail(e: BaseException, n: int = TRACEBACK_LINES) -> str:
    lines = "".join(traceback.format_exception(e)).rstrip().splitlines()
    return "\n".join(lines[-n:])


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:ERROR_CHARS]
