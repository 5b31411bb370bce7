"""Re-run one stored trial outside the service, from what the storage kept about it."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

import optuna

from trainers import train
from trainers.result import json_safe, to_float
from tuner.study.specs.metrics import LOAD_DEPENDENT
from tuner.study.store import records
from tuner.study.store.storage import stored_spec
from tuner.study.trial.progress import Log, elapsed, eval_lines
from tuner.study.trial.training import run_training, study_training


def rerun_trial(study: optuna.Study, number: int, *, device: str | None = None,
                out_dir: Path | None = None, trainer: Any = train,
                log: Log | None = None) -> str:
    """Train the trial's stored Recipe and ModelArgs again on the same corpus, seed and budget,
    with as many torch threads as the trial had (its recorded environment, else the spec's
    ``cpus_per_trial``): on CPU the thread count changes the order of float sums, so only then
    can a re-run reproduce the stored loss.
    ``log`` receives progress lines.

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
    say = log or (lambda line: None)
    t0 = time.monotonic()
    stored_hash = t.user_attrs.get(records.CORPUS_HASH)
    tokens = spec.budget.tokens_per_trial
    # the thread count the trial recorded, else what the spec gave each trial
    env = ((t.user_attrs.get(records.METRICS) or {}).get("environment") or {})
    threads = max(1, int(env.get("threads") or spec.resources.cpus_per_trial))
    say(f"trial {number}: started, {tokens:,} tokens, {threads} torch thread(s) as the trial "
        f"had; {elapsed(t0)} elapsed")
    # the device asked for, else the trial's; else a GPU when this machine has one
    training = dataclasses.replace(
        study_training(spec, model_args=t.user_attrs[records.MODEL_ARGS],
                       recipe=t.user_attrs[records.RECIPE],
                       seed=t.user_attrs.get(records.SEED, spec.study.seed)),
        cpus=threads, gpus=1, device=device or t.user_attrs.get(records.DEVICE) or "")
    trained = run_training(training, trainer=trainer,
                           on_eval=eval_lines(say, f"trial {number}", tokens, t0))
    result = trained.result_or_raise()
    stored_metrics = t.user_attrs.get(records.METRICS) or {}
    stored = stored_metrics.get("val_loss")
    compared = compare_metrics(stored_metrics, result.to_dict())
    out = {"study": study.study_name, "trial": number, "stored_val_loss": stored,
           "rerun_val_loss": result.val_loss if math.isfinite(result.val_loss) else "inf",
           "same_corpus": stored_hash in (None, trained.corpus_hash), "torch_threads": threads,
           "metrics": compared, "rerun": result.to_dict()}
    written = ""
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"rerun-{number}.json"
        path.write_text(json.dumps(out, indent=2) + "\n")
        written = f"; details in {path}"
    head = f"trial {number}: {_comparison(stored, result.val_loss)}" + (
        "" if out["same_corpus"] else " (the corpus changed since the study ran)") + written
    return "\n".join([head, *metric_lines(compared)])


def compare_metrics(stored: dict[str, Any], rerun: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every number both the stored trial and the re-run measured: ``{name: {stored, rerun}}``
    (inf/NaN as stored strings)."""
    out = {}
    for name, old in stored.items():
        new = rerun.get(name)
        if isinstance(old, bool) or isinstance(new, bool):
            continue
        a, b = to_float(old, default=math.nan), to_float(new, default=math.nan)
        if name in rerun and not (math.isnan(a) and math.isnan(b)) \
                and (isinstance(old, (int, float, str)) and isinstance(new, (int, float, str))):
            out[name] = {"stored": json_safe(a), "rerun": json_safe(b)}
    return out


def metric_lines(compared: dict[str, dict[str, Any]]) -> list[str]:
    """One line per re-measured metric; a trial's own timing is flagged as load-dependent."""
    lines = []
    for name, pair in compared.items():
        a, b = to_float(pair["stored"]), to_float(pair["rerun"])
        if a == b:
            change = "identical"
        elif math.isfinite(a) and math.isfinite(b) and a != 0:
            change = f"{b - a:+.3g} ({(b - a) / abs(a):+.2%})"
        else:
            change = "differs"
        note = ("  [measures the machine's load at that moment as much as the recipe]"
                if name in LOAD_DEPENDENT else "")
        lines.append(f"  {name}: stored {a:.6g}, re-run {b:.6g}, {change}{note}")
    return lines


def _comparison(stored: Any, rerun: float) -> str:
    """Stored vs re-run val_loss, with the difference spelled out."""
    if not isinstance(stored, int | float) or not math.isfinite(stored):
        return f"stored val_loss {stored}, re-run val_loss {rerun:.6g}"
    if rerun == stored:
        return f"val_loss {rerun:.6g}, identical to the stored value"
    return (f"stored val_loss {stored:.6g}, re-run {rerun:.6g} "
            f"({rerun - stored:+.3g}, {(rerun - stored) / abs(stored):+.2%})")
