"""A one-line progress bar for a running study: done/running/pruned/failed, best so far, ETA."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from tqdm import tqdm

if TYPE_CHECKING:
    from tuner.searcher import Tally


class StudyProgress:
    """Feeds a tqdm bar from the searcher's `Tally` (``on_change`` hook)."""

    def __init__(self, *, name: str, total: int, already_done: int, enabled: bool = True):
        self._base = already_done
        self._bar = tqdm(total=total, initial=already_done, desc=name, unit="trial",
                         disable=not enabled, file=sys.stderr, dynamic_ncols=True)

    def __call__(self, tally: Tally) -> None:
        self._bar.n = self._base + tally.done
        best = " ".join(f"{k}={v:.4g}" for k, v in tally.best.items())
        self._bar.set_postfix_str(
            f"running={tally.running} ok={tally.complete} infeasible={tally.infeasible} "
            f"pruned={tally.pruned} failed={tally.failed}"
            + (f" interrupted={tally.interrupted}" if tally.interrupted else "")
            + (f" best: #{tally.best_trial} {best}" if best else ""),
            refresh=False)
        self._bar.refresh()

    def close(self) -> None:
        self._bar.close()
