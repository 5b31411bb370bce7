"""Re-run one stored trial outside the service, from what the storage kept about it."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import optuna

from trainers import ModelArgs, Recipe, load_corpus, train
from tuner import records
from tuner.storage import stored_spec


def rerun_trial(study: optuna.Study, number: int, *, device: str | None = None,
                out_dir: Path | None = None, trainer: Any = train) -> str:
    """Train the trial's stored Recipe and ModelArgs again on the same corpus, seed and budget.

    Returns:
        A short comparison of the stored and the new val_loss (also written as JSON to
        ``out_dir/rerun-<number>.json`` when ``out_dir`` is given).

    Raises:
        LookupError: no such trial. ValueError: the trial never started training.
    """
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    if number not in trials:
        raise LookupError(f"trial: no trial {number} in study {study.study_name!r} "
                          f"(trials 0..{len(trials) - 1}).")
    t = trials[number]
    if records.RECIPE not in t.user_attrs:
        raise ValueError(f"trial {number}: never started training (no stored recipe).")
    spec = stored_spec(study)
    data = load_corpus(spec.data.corpus, vocab_size=spec.data.vocab_size or None)
    stored_hash = t.user_attrs.get(records.CORPUS_HASH)
    result = trainer(ModelArgs.from_dict(t.user_attrs[records.MODEL_ARGS]),
                     Recipe.from_dict(t.user_attrs[records.RECIPE]), data=data,
                     token_budget=spec.budget.tokens_per_trial,
                     seed=t.user_attrs.get(records.SEED, spec.study.seed),
                     eval_every_tokens=spec.budget.eval_every_tokens,
                     device=device or t.user_attrs.get(records.DEVICE) or None)
    stored = (t.user_attrs.get(records.METRICS) or {}).get("val_loss")
    out = {"study": study.study_name, "trial": number, "stored_val_loss": stored,
           "rerun_val_loss": result.val_loss if math.isfinite(result.val_loss) else "inf",
           "same_corpus": stored_hash in (None, data.hash), "rerun": result.to_dict()}
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / f"rerun-{number}.json").write_text(json.dumps(out, indent=2) + "\n")
    note = "" if out["same_corpus"] else " (corpus changed since the study ran)"
    return (f"trial {number}: stored val_loss {stored}, re-run val_loss "
            f"{out['rerun_val_loss']}{note}")
