"""The service benchmarks, one module per mode of ``benchmarks/bench_service.py`` (each module's
docstring says what it measures and its commands)."""

from __future__ import annotations

# mode -> module under benchmarks.service: each has add_arguments(parser) and run(args) -> int
MODES = {"load": "load", "app": "app", "asgi": "asgi", "page": "page"}
