"""The native export: `FullRun.to_dict()` as JSON, every rule and its source included."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tuner.modeling.full_run import FullRun


def render(full: FullRun) -> str:
    return json.dumps(full.to_dict(), indent=2, allow_nan=False, default=str) + "\n"
