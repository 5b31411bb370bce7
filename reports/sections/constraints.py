"""How a study's ``[constraints]`` limits read in a report: which metric, which side, which limit.

The bound's side is not stored next to the limit: `tuner.study.specs.metrics.constraint_target`
defines it from the key (``min_<metric>`` is a lower bound; ``<metric>`` and ``max_<metric>``
upper bounds), and the runner decides feasibility with that same function, so the report must
use it too.
"""

from __future__ import annotations

from dataclasses import dataclass

from tuner.study.specs.metrics import constraint_target


@dataclass(frozen=True, kw_only=True)
class Bound:
    """One constraint as the runner applies it: ``metric >= limit`` or ``metric <= limit``."""

    key: str
    metric: str
    op: str  # ">=" | "<=" | "" (a key no registered metric explains: side unknown)
    limit: float

    def text(self) -> str:
        """``tokens_per_s >= 1e+04``; says so when the side is unknown."""
        if not self.op:
            return f"limit {self.limit:.4g} (bound side unknown: no metric {self.key!r} here)"
        return f"{self.metric} {self.op} {self.limit:.4g}"


def bound(key: str, limit: float) -> Bound:
    """The constraint `key` (a spec's ``[constraints]`` key) with its side.

    Example:
        >>> bound("min_tokens_per_s", 1e4)
        Bound(key='min_tokens_per_s', metric='tokens_per_s', op='>=', limit=10000.0)
    """
    try:
        metric, kind = constraint_target(key)
    except ValueError:  # a metric registered only in the process that ran the study
        return Bound(key=key, metric=key, op="", limit=float(limit))
    return Bound(key=key, metric=metric, op=">=" if kind == "lower" else "<=",
                 limit=float(limit))
