"""The law benchmarks, one module per mode of ``benchmarks/bench_law.py`` (each module's
docstring says what it measures and its commands); `common` holds what they share."""

from __future__ import annotations

# mode -> module under benchmarks.law: each has add_arguments(parser) and run(args) -> int
MODES = {"one-batch": "one_batch", "batch": "batch", "pooled": "pooled", "table": "table",
         "backtest": "backtest", "grid": "grid", "beyond": "beyond",
         "held-batch": "held_batch", "anchored": "anchored", "other-lab": "other_lab"}
