"""ranked.md: the trials in the order a person should read them, and a terminal top table.

Feasible trials come first, by Pareto rank (1 = non-dominated) and then by crowding distance
(the more isolated point of a front first: it says more about the trade-off). Infeasible, pruned
and failed trials follow, grouped by reason, because why a region fails is a result too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import pandas as pd

from reports.analysis.frame import objective_columns, ranked
from reports.analysis.importance import Importances
from reports.analysis.progress import Progress
from reports.analysis.snapshot import Snapshot
from reports.sections import labels
from reports.sections.constraints import bound
from reports.sections.fp8_gap import DEEPSEEK_V3_BAR, Fp8Gap
from reports.sections.markdown import md_table, md_text
from reports.sections.recommend import markdown as recommend_md
from reports.sections.recommend import recommend
from reports.sections.start import markdown as start_md
from reports.sections.transfer import validation_lines
from tuner.modeling.vocab_share import vocab_share
from tuner.study.results.reasons import group_of
from tuner.study.specs.metrics import TIMED

# Objective values these may hold are stand-ins (worst case) or partial, so they are not shown.
GROUPS = (("infeasible", "Infeasible"), ("pruned", "Pruned"), ("fail", "Failed"),
          ("running", "Still running"), ("waiting", "Waiting"))


def fmt(v: object) -> str:
    """Compact number formatting for tables."""
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return "–"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def objective_cell(row: pd.Series, column: str) -> str:
    """An objective's value; a timed one (`metrics.TIMED`) with the spread of its
    repeats, e.g. ``2.14e+04 (spread 3.1%)``."""
    cell = fmt(row[column])
    spread = row.get("timed_spread") if column.removeprefix("objective.") in TIMED else None
    if isinstance(spread, float) and math.isfinite(spread) and cell != "–":
        cell += f" (spread {spread:.1%})"
    return cell


def recipe_line(row: pd.Series) -> str:
    """The trial's sampled parameters as ``name=value`` pairs, plus its precision label."""
    parts = [f"{c.removeprefix('param.')}={fmt(row[c])}" for c in row.index
             if c.startswith("param.") and not _missing(row[c])]
    prec = labels.precision_label(row.get("precision"), row.get("fp8_emulated"))
    if prec and not any(p.startswith("precision=") for p in parts):
        parts.append(f"precision={prec}")
    elif prec.startswith("fp8 ("):
        parts = [f"precision={prec}" if p.startswith("precision=") else p for p in parts]
    return " ".join(parts) or "(no sampled parameters)"


def _missing(v: object) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def top_table(frame: pd.DataFrame, n: int = 10) -> str:
    """Plain-text table of the top `n` feasible trials, for ``moetune status``.

    Example:
        >>> print(top_table(trials_frame(study), 5))
        rank  trial  val_loss  peak_memory_gb  recipe
        1     7      3.012     1.25            lr=0.003 ...
    """
    top = ranked(frame).head(n)
    if top.empty:
        return f"no feasible trial yet ({len(frame)} trial(s) in the study)"
    cols = objective_columns(frame)
    header = ["rank", "trial", *[c.removeprefix("objective.") for c in cols], "recipe"]
    rows = [[fmt(r["pareto_rank"]), fmt(r["number"]), *[objective_cell(r, c) for c in cols],
             recipe_line(r)] for _, r in top.iterrows()]
    widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=True)]
    lines = ["  ".join(x.ljust(w) for x, w in zip(line, widths, strict=True)).rstrip()
             for line in (header, *rows)]
    return "\n".join(lines)


def render_ranked(snapshot: Snapshot, *, importances: Importances, gaps: list[Fp8Gap],
                  prog: Progress) -> str:
    """The full ranked.md text."""
    lines = [f"# Study `{snapshot.study_name}`: ranked trials", ""]
    if snapshot.banner():
        lines += [f"> **{snapshot.banner()}**", ""]
    lines += recommend_md(recommend(snapshot)) + [""]
    lines += _summary(snapshot, prog) + [""]
    lines += start_md(snapshot)
    lines += _feasible_sections(snapshot) + [""]
    lines += _grouped(snapshot) + [""]
    lines += _what_matters(importances) + [""]
    lines += _fp8_section(gaps) + [""]
    checked = validation_lines(snapshot.study_user_attrs, snapshot.study_name)
    lines += ["## Transfer confidence", ""] + [f"- {x}" for x in checked]
    lines += ["", labels.LEGEND, ""]
    return "\n".join(lines)


def _summary(snapshot: Snapshot, prog: Progress) -> list[str]:
    df = snapshot.frame
    out = ["## Summary", ""]
    for o in snapshot.objectives:
        out.append(f"- Objective `{o.name}`: {o.direction} ({labels.quantity_label(o.name, df)})")
    for key, limit in snapshot.constraints.items():
        out.append(f"- Constraint `{key}`: {bound(key, limit).text()}")
    counts = df["outcome"].value_counts()
    parts = ", ".join(f"{counts[k]} {k}" for k in counts.index)
    out.append(f"- {len(df)} trial(s): {parts or 'none'}; {int(df['feasible'].sum())} feasible.")
    out += _vocab_line(snapshot)
    if prog.kind == "hypervolume" and prog.values and prog.reference is not None:
        names = [o.name for o in snapshot.objectives]
        out.append(f"- Hypervolume of the feasible Pareto set: {prog.values[-1]:.6g}, "
                   f"reference point {prog.reference.describe(names)}.")
    elif prog.kind == "best" and prog.values:
        out.append(f"- Best `{snapshot.objectives[0].name}`: {prog.values[-1]:.6g}.")
    return out


def _vocab_line(snapshot: Snapshot) -> list[str]:
    """How much of the proxy is its vocabulary (`tuner.modeling.vocab_share`), at the first
    trial on record's sequence length."""
    rec = next((r for r in snapshot.records if r.model_args_dict and r.recipe_dict), None)
    if rec is None:
        return []
    text = vocab_share(rec.model_args, rec.recipe.seq_len).sentence()
    return [f"- Vocabulary: {text[0].upper()}{text[1:]}."]


def _feasible_sections(snapshot: Snapshot) -> list[str]:
    df = ranked(snapshot.frame)
    if df.empty:
        return ["## Ranked trials", "", "No feasible trial: nothing to rank yet. "
                "The groups below say why each trial did not count."]
    cols = objective_columns(snapshot.frame)
    single = len(cols) == 1
    sd = snapshot.noise_sd
    out = []
    fronts = [("Best trial" if single else "Pareto set (rank 1)", df[df.pareto_rank == 1]),
              ("Other feasible trials", df[df.pareto_rank != 1])]
    for title, part in fronts:
        if part.empty:
            continue
        header, rows = ranking_table(part, cols, knee=not single, ties=sd is not None,
                                     best=lowest_loss(df))
        rows = [[f"`{c}`" if h == "recipe" else emphasis(c, lambda w: f"**{w}**")
                 for h, c in zip(header, row, strict=True)] for row in rows]
        out += [f"## {title}", ""] + md_table(header, rows) + [""]
    if sd is not None:
        out += [f"**tied**: {tie_legend(sd, lowest_loss(df))}", ""]
    knee = df[df["knee"].astype(bool)]
    if not single and not knee.empty:
        n = int(knee["number"].iloc[0])
        out += [f"The knee of the Pareto set is trial #{n} (marked **knee**): the best balance of "
                f"the objectives, and what `moetune export {snapshot.study_name} --pick knee` "
                "takes.", ""]
    return out  # who is tied with the knee: said once, in the recommendation above


# -- the ranked table's cells: one rule for ranked.md and report.html --------------------------

MARKS = ("knee", "tied")  # the words a renderer emphasises in the knee and tied columns


def lowest_loss(frame: pd.DataFrame) -> float:
    """The lowest val_loss among the feasible trials of ``frame`` (NaN when none has one)."""
    feas = frame[frame["feasible"].astype(bool)]
    return float(feas["val_loss"].astype(float).min()) if not feas.empty else math.nan


def ranking_table(part: pd.DataFrame, cols: Sequence[str], *, knee: bool, ties: bool,
                  best: float) -> tuple[list[str], list[list[str]]]:
    """Header and plain-text cells of a ranked table: rank, trial, objective values, recipe,
    then (several objectives) the ``knee`` column and (noise measured) the ``tied`` column.
    ``best`` is the lowest feasible val_loss (`lowest_loss`); a renderer adds its emphasis."""
    header = ["rank", "trial", *[c.removeprefix("objective.") for c in cols], "recipe"]
    header += ["knee"] * knee + ["tied"] * ties
    rows = []
    for _, r in part.iterrows():
        row = [fmt(r["pareto_rank"]), f"#{r['number']}", *[objective_cell(r, c) for c in cols],
               recipe_line(r)]
        rows.append(row + [knee_cell(r)] * knee + [tie_cell(r, best)] * ties)
    return header, rows


def knee_cell(row: pd.Series) -> str:
    """``knee``; ``tied with knee`` for a feasible trial within the noise of it (frame column
    ``tied_knee``); else empty."""
    if bool(row["knee"]):
        return "knee"
    return "tied with knee" if _yes(row.get("tied_knee")) else ""


def tie_cell(row: pd.Series, best: float) -> str:
    """``best``; ``tied (+0.004)`` for a val_loss within the noise of the best (frame column
    ``tied_best``); else empty."""
    loss = float(row["val_loss"])
    if loss == best:
        return "best"
    return f"tied ({loss - best:+.3g})" if _yes(row.get("tied_best")) else ""


def tie_legend(sd: float, best: float) -> str:
    """What the tied column means (after the word "tied:")."""
    return (f"val_loss within the measured run-to-run noise (±{sd:.3g}) of the lowest feasible "
            f"val_loss ({best:.4g}); the order among tied trials may be the seed's, not the "
            "recipe's.")


def emphasis(cell: str, strong: Callable[[str], str]) -> str:
    """``cell`` with its first word wrapped by ``strong`` when it is one of `MARKS`."""
    word, sep, rest = cell.partition(" ")
    return strong(word) + sep + rest if word in MARKS else cell


def _yes(v: object) -> bool:
    """A nullable boolean cell: NA (a tie that cannot be judged) counts as no."""
    return not _missing(v) and bool(v)


def _grouped(snapshot: Snapshot) -> list[str]:
    df = snapshot.frame
    reruns = {int(r): int(n) for r, n in zip(df["rerun_of"], df["number"], strict=True)
              if not _missing(r)}
    out = []
    for outcome, title in GROUPS:
        part = df[df["outcome"] == outcome]
        if part.empty:
            continue
        out += [f"## {title} ({len(part)})", ""]
        recs = snapshot.records_by_number
        keyed = [group_of(recs[int(n)].reasons) for n in part["number"]]
        kinds = pd.Series([k for k, _ in keyed], index=part.index)
        details = dict(zip(part.index, (d for _, d in keyed), strict=True))
        for i, n in zip(part.index, part["number"], strict=True):  # interrupted, then re-run
            if n in reruns:
                details[i] = ", ".join(x for x in (details[i], f"re-run as #{reruns[n]}") if x)
        for key, g in part.groupby(kinds, sort=False):
            trials = ", ".join(f"#{n}" + (f" ({md_text(details[i])})" if details[i] else "")
                               for i, n in zip(g.index, g["number"], strict=True))
            out.append(f"- {md_text(key) or '(no reason recorded)'} ({len(g)}): {trials}")
        out.append("")
    return out


def _what_matters(imp: Importances) -> list[str]:
    out = ["## What matters", "",
           f"Parameter importances ({imp.how()}; each objective's means sum to 1):", ""]
    if imp.values:
        params = sorted({p for v in imp.values.values() for p in v},
                        key=lambda p: -max(v.get(p, 0.0) for v in imp.values.values()))
        header = ["parameter", *imp.values]
        rows = [[p, *[_importance_cell(imp, o, p) for o in imp.values]] for p in params]
        out += md_table(header, rows) + [""]
    out += [f"- {n}" for n in imp.notes]
    return out


def _importance_cell(imp: Importances, objective: str, param: str) -> str:
    """``0.71 [0.52, 0.88]``: the mean and its interval."""
    value = imp.values[objective].get(param, math.nan)
    low, high = imp.interval(objective, param)
    return f"{fmt(value)} [{fmt(low)}, {fmt(high)}]" if math.isfinite(low) else fmt(value)


def _fp8_section(gaps: list[Fp8Gap]) -> list[str]:
    out = ["## fp8 vs bf16", ""]
    if not gaps:
        return out + ["Not measured: the study has no finished fp8 and bf16 trials to compare."]
    out.append(f"Relative val_loss gap (fp8 − bf16) / bf16; DeepSeek-V3's bar: "
               f"< {DEEPSEEK_V3_BAR:.2%}.")
    out.append("")
    rows = [[f"#{g.fp8_trial}", f"#{g.bf16_trial}", fmt(g.fp8_loss), fmt(g.bf16_loss),
             f"{g.relative:+.3%}", ("yes" if g.within_bar else "no") if g.matched else "n/a",
             "same recipe" if g.matched else "best of each: recipes differ, not a precision "
             "effect",
             "emulated" if g.fp8_emulated else ("native" if g.fp8_emulated is False else "–")]
            for g in gaps]
    return out + md_table(["fp8", "bf16", "fp8 loss", "bf16 loss", "gap", "within bar",
                            "pairing", "fp8 kernels"], rows)
