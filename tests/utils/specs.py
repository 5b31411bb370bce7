"""Test data: the smallest study spec a fake-trained study runs, as a table or parsed, with any
section replaced (the FastAPI full-stack template's ``tests/utils`` pattern). A test states only
what it cares about::

    spec = minimal_spec("noisy", study={"noise_repeats": 2})
    table = spec_table(objectives={"val_loss": "minimize", "tokens_per_s": "maximize"})
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from tuner.study.specs.spec import StudySpec, spec_from_dict

# lr searched on a log scale, the one knob every sampler and the fake trainers respond to
LR_SPACE: dict[str, Any] = {"params": {"lr": {"type": "float", "low": 1e-4, "high": 1e-2,
                                              "log": True}}}
TOKENS = 300  # three evaluations of 100 tokens: a debug-preset trial in well under a second


def spec_table(name: str = "s", *, study: Mapping[str, Any] | None = None,
               tokens: int = TOKENS, **sections: Any) -> dict[str, Any]:
    """``[study]`` named ``name`` (4 trials, one at a time) with ``study``'s keys merged in,
    ``tokens`` per trial evaluated three times, no pruning, lr searched; each of ``sections``
    (``space=``, ``objectives=``, ``model=``, ...) replaces that table whole."""
    table: dict[str, Any] = {
        "study": {"name": name, "n_trials": 4, "max_concurrent": 1, **(study or {})},
        "budget": {"tokens_per_trial": tokens, "eval_every_tokens": tokens // 3},
        "pruning": {"scheduler": "none"},
        "space": copy.deepcopy(LR_SPACE),
    }
    return table | {k: copy.deepcopy(v) for k, v in sections.items()}


def minimal_spec(name: str = "s", **kw: Any) -> StudySpec:
    """`spec_table` parsed and its inputs checked (`spec_from_dict`, as ``submit`` does)."""
    return spec_from_dict(spec_table(name, **kw))
