"""Transfer confidence: does a study's ranking of recipes survive a larger proxy?

`validate_study` re-trains the top-K feasible trials (by val_loss) on a proxy ``scale`` times
wider (same depth and proportions, via `trainers.shrink`) and optionally on ``token_scale``
times the tokens. Each recipe moves with the export's own rules: µP studies keep the LR, others
scale it by the compute law (C_large / C_proxy)^−0.125; batch sizes in sequences are kept. The
result (measured) is the Spearman rank correlation between the two val_loss rankings and
whether the chosen (best-loss) recipe is still best; it is stored in the study under
`records.VALIDATION` so reports and exports show it.

Re-training takes as long as the study's trials did (minutes to hours), so progress goes to
stderr line by line (which trial, tokens so far, elapsed time): lines, not a redrawn bar, so
they stay readable in a log file too.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import time
from collections.abc import Callable
from typing import Any

import optuna

from trainers import ModelArgs, Recipe
from trainers.presets import at_width
from trainers.result import json_safe
from tuner.modeling import scaling
from tuner.study.results.trial_record import TrialRecord, trial_records
from tuner.study.specs.spec import DataSection
from tuner.study.store import records
from tuner.study.store.storage import stored_spec
from tuner.study.trial.progress import Log, elapsed, eval_lines, stderr_lines
from tuner.study.trial.training import Training, run_training


def widen(a: ModelArgs, scale: float) -> ModelArgs:
    """The proxy ``scale`` times wider (dim, FFN widths, heads) at the same depth."""
    dim = int(round(a.dim * scale))
    if dim < 1:
        raise ValueError(f"scale: must make dim >= 1, but got scale={scale!r} for dim={a.dim}.")
    return at_width(a, dim)


def _ranks(xs: list[float]) -> list[float]:
    """1-based ranks, ties sharing their average rank."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(x: list[float], y: list[float]) -> float:
    """Spearman's rank correlation (Pearson on average ranks); NaN if a side is constant."""
    if len(x) != len(y) or len(x) < 2:
        raise ValueError(f"spearman: needs two equal-length lists of >= 2 values, but got "
                         f"{len(x)} and {len(y)}.")
    rx, ry = _ranks(x), _ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    vx = sum((a - mx) ** 2 for a in rx)
    vy = sum((b - my) ** 2 for b in ry)
    return cov / math.sqrt(vx * vy) if vx and vy else math.nan




_STDERR = stderr_lines("validate")  # the default progress sink


def _scaled_recipe(r: TrialRecord, large: ModelArgs, tokens: int) -> Recipe:
    seq = r.recipe.seq_len
    budget = int(float(r.metrics.get("token_budget") or tokens))
    lr, _, _ = scaling.scale_lr(r.model_args, r.recipe.lr,
                                scaling.compute_budget(r.model_args, seq, budget), large,
                                scaling.compute_budget(large, seq, tokens))
    return dataclasses.replace(r.recipe, lr=lr)


def validate_study(study: optuna.Study, *, top: int, scale: float = 2.0,
                   token_scale: float = 1.0, trainer: Callable[..., Any] | None = None,
                   device: str | None = None, record: bool = True,
                   log: Log | None = _STDERR) -> dict[str, Any]:
    """Re-train the top-``top`` feasible trials at ``scale`` × width; returns (and stores)
    the validation record.

    Args:
        log: gets one line per progress event (None: silent).

    Raises:
        LookupError: fewer than two feasible trials with a finite val_loss.
    """
    if top < 2:
        raise ValueError(f"--top: must be >= 2 to rank, but got top={top!r}.")
    if not (scale > 0 and token_scale > 0):
        raise ValueError(f"--scale and --token-scale: must be > 0, but got scale={scale!r}, "
                         f"token_scale={token_scale!r}.")
    pool = [r for r in trial_records(study)
            if r.trained and r.feasible and math.isfinite(r.metric("val_loss"))]
    pool.sort(key=lambda r: (r.metric("val_loss"), r.number))
    chosen = pool[:top]
    if len(chosen) < 2:
        raise LookupError(f"study {study.study_name!r}: {len(chosen)} feasible trial(s) with a "
                          "finite val_loss; validation needs at least 2.")
    say = log or (lambda line: None)
    t0 = time.monotonic()
    say(f"re-training trials {', '.join(str(r.number) for r in chosen)} at {scale:g}x width")
    spec = stored_spec(study)
    if trainer is None:
        from trainers import train  # torch loads only when a validation trains

        trainer = train
    tokens = int(spec.budget.tokens_per_trial * token_scale)
    rows = _retrain(chosen, scale=scale, tokens=tokens, trainer=trainer, data=spec.data,
                    device=device, say=say, t0=t0)
    scaled = [float(x["scaled_val_loss"]) for x in rows]
    best_scaled = min(range(len(rows)), key=lambda i: (scaled[i], i))
    out = {"label": "measured", "top": top, "scale": scale, "token_scale": token_scale,
           "tokens": tokens, "large_model_args": widen(chosen[0].model_args, scale).to_dict(),
           "rows": rows, "spearman": spearman([x["proxy_val_loss"] for x in rows], scaled),
           "chosen_trial": chosen[0].number, "chosen_stays_on_top": best_scaled == 0,
           "best_at_scale": rows[best_scaled]["trial"],
           "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}
    if record:
        study.set_user_attr(records.VALIDATION, json_safe(out))
    return out


def _retrain(chosen: list[TrialRecord], *, scale: float, tokens: int, trainer: Callable,
             data: DataSection, device: str | None, say: Log,
             t0: float) -> list[dict[str, Any]]:
    rows = []
    for i, r in enumerate(chosen, 1):
        where = f"trial {r.number} ({i}/{len(chosen)})"
        large = widen(r.model_args, scale)
        recipe = _scaled_recipe(r, large, tokens)
        say(f"{where}: started, {tokens:,} tokens at lr {recipe.lr:.3g}; {elapsed(t0)} "
            "elapsed")
        # in this command's own process: its threads as they are; the device asked for, else
        # a GPU when this machine has one
        training = Training(model_args=large.to_dict(), recipe=recipe.to_dict(), data=data,
                            token_budget=tokens, seed=r.recipe.seed, gpus=1,
                            device=device or "")
        res = run_training(training, trainer=trainer,
                           on_eval=eval_lines(say, where, tokens, t0)).result_or_raise()
        rows.append({"trial": r.number, "proxy_val_loss": r.metric("val_loss"),
                     "scaled_val_loss": res.val_loss if math.isfinite(res.val_loss) else "inf",
                     "lr": recipe.lr, "diverged": bool(res.diverged)})
        say(f"{where}: done, val_loss {r.metric('val_loss'):.4f} -> {res.val_loss:.4f}; "
            f"{elapsed(t0)} elapsed")
    return rows
