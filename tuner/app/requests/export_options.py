"""The export's options checked and made into the full run, for both front ends: the CLI's
flags (`tuner.app.export_command`) and the service's request (`tuner.app.requests.actions`). An
error names the option as its flag (``--gpus``), the rule and the value."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from trainers.config.validation import FieldError, relabel
from tuner.app.requests.errors import UsageError
from tuner.modeling.anchor.recipe_table import load_recipes
from tuner.modeling.full_run import FullRunLimits, FullRunTarget, load_target
from tuner.modeling.hardware import get_hardware


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


class FlagError(UsageError, FieldError):
    """A command-line option breaks a rule; ``field`` is the flag (``--gpus``)."""


def _as_flag(e: FieldError) -> FieldError:
    """``e``, of a full run's field (`FullRunLimits`, the target), said of its flag."""
    flag = _flag(e.field)
    return relabel(e, flag, error=FlagError, shown=lambda v: f"{flag} {v!r}")


def check_numbers(args: argparse.Namespace) -> None:
    """Range checks of the numeric options: the full run's are `FullRunLimits`' (a spec's
    ``[full_run]`` has the same), the pick's below; the error names the option, the rule and
    the value.

    Raises:
        UsageError: the first option out of range (a `FlagError`: ``field`` is the flag).
    """
    def bad(name: str, rule: str) -> UsageError:
        return UsageError(f"{_flag(name)}: must be {rule}, but got {_flag(name)} "
                          f"{getattr(args, name)!r}.")

    try:  # None: chosen by a rule
        FullRunLimits(gpus=args.gpus, tokens=args.tokens, seq_len=args.seq_len,
                      global_batch=args.global_batch, micro_batch=args.micro_batch,
                      memory_fraction=args.memory_fraction, mfu=args.mfu, tp=args.tp,
                      pp=args.pp, ep=args.ep)
    except FieldError as e:
        raise _as_flag(e) from None
    if args.max_memory_gb is not None and not args.max_memory_gb > 0:
        raise bad("max_memory_gb", "positive")
    if args.min_tokens_per_s is not None and not args.min_tokens_per_s >= 0:
        raise bad("min_tokens_per_s", "at least 0")
    if args.lr is not None and not (math.isfinite(args.lr) and args.lr > 0):
        raise bad("lr", "a positive number")


def parse_target(args: argparse.Namespace) -> FullRunTarget:
    check_numbers(args)
    tokens = args.tokens
    try:
        model_args, name = load_target(args.target)
    except FieldError as e:
        raise _as_flag(e) from None
    return FullRunTarget(model_args=model_args, name=name, hardware=get_hardware(args.hardware),
                         gpus=args.gpus, tokens=int(tokens), seq_len=args.seq_len,
                         global_batch=args.global_batch, micro_batch=args.micro_batch,
                         memory_fraction=args.memory_fraction, mfu=args.mfu, tp=args.tp,
                         pp=args.pp, ep=args.ep, lr=args.lr,
                         lr_at_fitted_batch=args.lr_at_fitted_batch,
                         lr_wide_band=args.lr_wide_band, recipes=_recipes(args))


def _recipes(args: argparse.Namespace) -> Path | None:
    """``--recipes``: a team's own runs, checked here (row, column, rule, value) before any
    work; the service's requests carry none."""
    path = getattr(args, "recipes", None)
    if path is None:
        return None
    try:
        load_recipes(team=Path(path))
    except FieldError as e:
        raise FlagError(f"--recipes: {e}", "--recipes") from None
    return Path(path)
