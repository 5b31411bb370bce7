"""Study → pandas DataFrame: one row per trial, everything a report or a spreadsheet needs.

Columns (prefixes keep names from colliding):
    number, state, outcome, feasible, pareto_rank, crowding, knee, tied_best, tied_knee, reason,
    objective.<name>   objective values in their own orientation (NaN when the trial has none),
    constraint.<name>  constraint values (feasible iff <= 0),
    param.<name>       the sampled parameters,
    duration_s, tokens, precision, fp8_emulated, seed, peak_memory_gb, peak_memory_method,
    tokens_per_s, val_loss, max_vio_batch, max_vio_val, loss_spikes, diverged,
    timed_tokens_per_s, timed_spread   the timing of the trial's systems signature, alone on
                       the cores (median of repeats, and their (max − min) / median), NaN in a
                       study that does not time them (`tuner.study.trial.timing`),
    vocab_params_share, vocab_flops_share   the share of the proxy's parameters and of its
                       training FLOPs per token in embedding + head, at the trial's seq_len
                       (modeled: `tuner.modeling.vocab_share`; NaN without a recipe on record),
    rerun_of           the interrupted trial this one re-runs, if any,
    origin             how its point was chosen when not by the sampler: enqueued,
                       baseline:<name>, warm_start:<study> (never feasible: measured elsewhere).

`pareto_rank` (1 = Pareto set) and `crowding` are computed over the feasible trials only; the
others have no rank. `knee` marks the one trial `moetune export --pick knee` takes. Feasibility,
ranks and the knee all come from the study core (`tuner.study.results.trial_record`,
`tuner.study.results.ranking`), so the report and the export cannot disagree.

Ties, by the core's one rule (`tuner.study.results.noise`), given the study's measured val_loss
noise: `tied_best` marks a feasible trial whose val_loss is within the noise of the lowest feasible
val_loss (that trial included); `tied_knee` marks a feasible trial tied with the knee
(`noise.knee_ties`: on the front or off it; with one objective, a tie with the best). Both are
NA where a tie cannot be judged: no noise measured, or the trial is no candidate. ranked.md and
report.html both read these columns.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import optuna
import pandas as pd

from trainers.result import GIB, NON_FINITE, to_float
from tuner.modeling.vocab_share import vocab_share
from tuner.study.results.noise import knee_ties, noise_sd, tied
from tuner.study.results.ranking import rank_and_crowd, study_knee, to_minimization
from tuner.study.results.trial_record import (
    Objective,
    TrialRecord,
    study_objectives,
    trial_records,
)

METRIC_COLUMNS = ("tokens_per_s", "val_loss", "max_vio_batch", "max_vio_val", "loss_spikes",
                  "diverged")
TIMING_COLUMNS = {"timed_tokens_per_s": "tokens_per_s", "timed_spread": "spread"}  # of TIMING


def trials_frame(study: optuna.Study, *,
                 trials: Sequence[optuna.trial.FrozenTrial] | None = None) -> pd.DataFrame:
    """One row per trial of `study` (or of the given `trials`, a snapshot of it).

    Example:
        >>> df = trials_frame(study)
        >>> df[df.pareto_rank == 1][["number", "objective.val_loss"]]
    """
    return records_frame(trial_records(study, trials=trials), study_objectives(study),
                         noise=noise_sd(study.user_attrs))


def records_frame(recs: Sequence[TrialRecord], objectives: Sequence[Objective], *,
                  noise: float | None = None) -> pd.DataFrame:
    """`trials_frame` for trial records already read; ``noise``: the study's measured val_loss
    sd (`tuner.study.results.noise.noise_sd`), None when not measured."""
    rows = [_row(r, objectives) for r in recs]
    df = pd.DataFrame(rows, columns=_columns(rows, objectives))
    df = _add_ranks(df, objectives)
    knee = study_knee(recs, objectives)
    df["knee"] = df["number"] == (knee.number if knee is not None else -1)
    return _add_ties(df, recs, objectives, noise)


def _add_ties(df: pd.DataFrame, recs: Sequence[TrialRecord], objectives: Sequence[Objective],
              noise: float | None) -> pd.DataFrame:
    df["tied_best"] = pd.Series(pd.NA, index=df.index, dtype="boolean")
    df["tied_knee"] = pd.Series(pd.NA, index=df.index, dtype="boolean")
    feasible = df["feasible"].astype(bool)
    loss = df["val_loss"].astype(float)
    if noise is not None and (feasible & loss.map(math.isfinite)).any():
        best = float(loss[feasible].min())
        df.loc[feasible, "tied_best"] = [tied(v, best, noise) for v in loss[feasible]]
    ties = knee_ties(recs, objectives, noise)
    if ties is not None and ties.judged:
        candidates = feasible & (df["number"] != ties.knee)
        df.loc[candidates, "tied_knee"] = df.loc[candidates, "number"].isin(ties.tied)
    return df


def _columns(rows: list[dict[str, Any]], objectives: Sequence[Objective]) -> list[str]:
    head = ["number", "state", "outcome", "feasible", "pareto_rank", "crowding", "knee",
            "tied_best", "tied_knee", "reason"]
    head += [o.column for o in objectives]
    rest = sorted({k for r in rows for k in r if k.startswith("constraint.")})
    rest += sorted({k for r in rows for k in r if k.startswith("param.")})
    rest += ["duration_s", "tokens", "precision", "fp8_emulated", "seed", "peak_memory_gb",
             "peak_memory_method", *METRIC_COLUMNS, *TIMING_COLUMNS, "vocab_params_share",
             "vocab_flops_share", "rerun_of", "origin"]
    return head + rest


def _row(r: TrialRecord, objectives: Sequence[Objective]) -> dict[str, Any]:
    metrics = r.metrics
    row: dict[str, Any] = {
        "number": r.number,
        "state": r.state.name,
        "outcome": r.outcome,
        "reason": r.reason,
        "duration_s": r.duration_s,
        "tokens": metrics.get("tokens_trained"),
        "precision": metrics.get("precision", r.recipe_dict.get("precision",
                                                                r.params.get("precision"))),
        "fp8_emulated": metrics.get("fp8_emulated"),
        "seed": r.seed if r.seed is not None else metrics.get("seed", r.recipe_dict.get("seed")),
        "peak_memory_gb": to_float(metrics.get("peak_memory_bytes")) / GIB,
        "peak_memory_method": metrics.get("peak_memory_method"),
        "rerun_of": r.rerun_of,
        "origin": r.origin,
        "feasible": r.feasible,
    }
    row.update({o.column: r.values.get(o.name, math.nan) for o in objectives})
    row.update({f"constraint.{k}": v for k, v in r.constraints.items()})
    row.update({f"param.{k}": v for k, v in r.params.items()})
    row.update({k: _number(metrics.get(k)) for k in METRIC_COLUMNS})
    row.update({c: to_float(r.timing.get(k)) for c, k in TIMING_COLUMNS.items()})
    row["vocab_params_share"] = row["vocab_flops_share"] = math.nan
    if r.model_args_dict and r.recipe_dict:  # modeled from the architecture, per trial
        share = vocab_share(r.model_args, r.recipe.seq_len)
        row["vocab_params_share"], row["vocab_flops_share"] = share.params, share.flops
    return row


def _number(v: Any) -> Any:
    """A METRICS value for a table cell: stored inf/NaN strings as floats, the rest as is."""
    return to_float(v) if isinstance(v, str) and v in NON_FINITE else v


def _add_ranks(df: pd.DataFrame, objectives: Sequence[Objective]) -> pd.DataFrame:
    df["pareto_rank"] = pd.Series(pd.NA, index=df.index, dtype="Int64")
    df["crowding"] = np.nan
    feasible = df.index[df["feasible"].astype(bool)]
    if len(feasible):
        pts = to_minimization(df.loc[feasible, [o.column for o in objectives]].to_numpy(float),
                              [o.direction for o in objectives])
        ranks, crowd = rank_and_crowd(pts)
        df.loc[feasible, "pareto_rank"] = ranks
        df.loc[feasible, "crowding"] = crowd
    return df


def objective_columns(frame: pd.DataFrame) -> list[str]:
    """The ``objective.*`` columns of a frame, in objective order."""
    return [c for c in frame.columns if c.startswith("objective.")]


def ranked(frame: pd.DataFrame) -> pd.DataFrame:
    """Feasible trials in report order: Pareto rank, then larger crowding distance, then number."""
    feas = frame[frame["feasible"].astype(bool)].copy()
    feas["_crowd"] = -feas["crowding"].astype(float)
    return feas.sort_values(["pareto_rank", "_crowd", "number"]).drop(columns="_crowd")
