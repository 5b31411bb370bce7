"""Two law studies side by side, written through the storage API (no Ray, no trainer): a team's
and a reference configuration's, every cell's lr bowl at a known multiple of `reference`'s lr*,
for the offset between them (`tuner.modeling.anchor.offset`) through ``moetune export
--reference`` and the service's export. A plain module, imported by the tests that use it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from tuner.study.specs.proxy import resolve_model_args
from tuner.study.specs.spec import load_spec
from tuner.study.store import records
from tuner.study.store import storage as st
from tuner.study.trial.samplers import make_sampler
from tuner.study.workflows.law import budget_spec

LAW_TOML = Path(__file__).resolve().parents[2] / "search_spaces" / "law.toml"
TOKENS = (16_384.0, 49_152.0, 147_456.0, 524_288.0)  # law.toml's budgets


def reference(t: float, b: float) -> float:
    """The reference configuration's lr* at ``t`` tokens and a batch of ``b`` tokens."""
    return 3e-3 * (t / 1e5) ** -0.2 * (b / 1024) ** 0.4


def write_law(store: Any, name: str, factor: float) -> None:
    """A law study ``name`` on law.toml's grid, every cell's lr bowl at ``factor`` times
    `reference`'s lr*, 7 lrs per cell, written through the storage API."""
    spec = load_spec(LAW_TOML, overrides={"study.name": name, "study.n_trials": 21,
                                          "study.sampler": "random", "study.noise_repeats": 0,
                                          "law.held_out": 0, "law.held_out_batch": 0})
    args = resolve_model_args(spec)
    for i, tokens in enumerate(TOKENS):
        bspec = budget_spec(spec, i)
        study = st.create_study(bspec, store, make_sampler(bspec))
        for seqs in (1, 4, 16):
            star = factor * reference(tokens, seqs * 128.0)
            for k, lr in enumerate(star * 10 ** np.linspace(-0.6, 0.6, 7)):
                study.enqueue_trial({"lr": float(lr), "batch_end": seqs})
                t = study.ask()
                bspec.space.suggest(t)
                loss = 2.0 + math.log10(lr / star) ** 2 + 0.002 * math.sin(k + seqs + i)
                t.set_user_attr(records.RECIPE, bspec.space.to_recipe(t.params).to_dict())
                t.set_user_attr(records.MODEL_ARGS, args.to_dict())
                t.set_user_attr(records.OUTCOME, "complete")
                t.set_user_attr(records.METRICS, {"val_loss": loss, "token_budget": tokens})
                study.tell(t, [loss])
