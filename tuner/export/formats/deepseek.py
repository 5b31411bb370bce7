"""DeepSeek-style model config JSON: `ModelArgs.to_dict()`, loadable by `ModelArgs.from_json`.

``max_seq_len`` is set to the run's sequence length so the file describes the trained model.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tuner.modeling.full_run import FullRun


def render(full: FullRun) -> str:
    d = full.model_args.to_dict() | {"max_seq_len": max(full.model_args.max_seq_len,
                                                        full.recipe.seq_len)}
    return json.dumps(d, indent=2) + "\n"
