"""The GPU scripts' guarded sections: a device lease is short, so one failing section must not
lose the others, and a run cut short must keep what it measured."""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any


def run_section(res: dict[str, Any], out: str | Path, name: str,
                fn: Callable[[], Any]) -> None:
    """``res[name] = fn()``, or its traceback in ``res["errors"][name]``; the seconds it took in
    ``res["section_s"]``; ``res`` rewritten to ``out`` as JSON after every section."""
    t0 = time.perf_counter()
    try:
        res[name] = fn()
    except Exception:  # noqa: BLE001 - one section failing must not lose the others
        res.setdefault("errors", {})[name] = traceback.format_exc()[-3000:]
        print(f"[{name}] FAILED\n{res['errors'][name]}", flush=True)
    res.setdefault("section_s", {})[name] = time.perf_counter() - t0
    Path(out).write_text(json.dumps(res, indent=2))
    print(f"[{name}] {res['section_s'][name]:.1f}s {json.dumps(res.get(name))[:2000]}",
          flush=True)
