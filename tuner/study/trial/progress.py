"""Progress of long work: a one-line bar for a running study (trials done, the running trials'
tokens trained as a fraction, running (and of those, timing their systems signature with the
cores held, before they train)/pruned/failed, best so far, ETA), and progress lines for
single re-trainings (`moetune validate`, `moetune rerun`): lines, not a redrawn bar, so they
stay readable in a log file too."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tqdm import tqdm

if TYPE_CHECKING:
    from tuner.study.trial.searcher import Tally


class StudyProgress:
    """Feeds a tqdm bar from the searcher's `Tally` (``on_change`` hook)."""

    def __init__(self, *, name: str, total: int, already_done: int, enabled: bool = True):
        self._base = already_done
        self._bar = tqdm(total=total, initial=already_done, desc=name, unit="trial",
                         disable=not enabled, file=sys.stderr, dynamic_ncols=True)

    def __call__(self, tally: Tally) -> None:
        # finished trials, plus the running ones' share of their tokens trained: the bar moves
        # at each evaluation, not only when a trial ends
        self._bar.n = round(self._base + tally.done + tally.in_flight, 1)
        best = " ".join(f"{k}={v:.4g}" for k, v in tally.best.items())
        self._bar.set_postfix_str(
            f"running={tally.running}"
            + (f" (timing={tally.timing})" if tally.timing else "")
            + f" ok={tally.complete} infeasible={tally.infeasible} "
            f"pruned={tally.pruned} failed={tally.failed}"
            + (f" interrupted={tally.interrupted}" if tally.interrupted else "")
            + (f" best: #{tally.best_trial} {best}" if best else ""),
            refresh=False)
        self._bar.refresh()

    def close(self) -> None:
        self._bar.close()


Log = Callable[[str], None]


def stderr_lines(command: str) -> Log:
    """A progress sink: one line per event on stderr, prefixed ``moetune <command>:``."""
    def say(line: str) -> None:
        print(f"moetune {command}: {line}", file=sys.stderr, flush=True)
    return say


def elapsed(t0: float) -> str:
    """Time since ``t0`` (a `time.monotonic()` reading), e.g. ``12.9 s`` or ``3 min 05 s``."""
    s = time.monotonic() - t0
    return f"{s:.1f} s" if s < 60 else f"{int(s // 60)} min {s % 60:02.0f} s"


def eval_lines(say: Log, where: str, tokens: int, t0: float) -> Callable[..., None]:
    """An ``on_eval`` for `trainers.train` that reports how far a training is (never stops it)."""
    def on_eval(seen: int, metrics: dict) -> None:
        loss = metrics.get("val_loss")
        say(f"{where}: {seen:,}/{tokens:,} tokens"
            + (f", val_loss {loss:.4f}" if isinstance(loss, float) else "")
            + f"; {elapsed(t0)} elapsed")
    return on_eval
