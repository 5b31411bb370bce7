"""report.html: one self-contained file with interactive Plotly figures.

plotly.js is embedded inline (no CDN, no network), so the file opens offline, from an e-mail
attachment or a shared drive, years from now.
"""

from __future__ import annotations

import html as html_lib
import re

import plotly.graph_objects as go
import plotly.offline
from plotly.subplots import make_subplots

from reports import series
from reports.analysis.frame import ranked
from reports.analysis.importance import Importances
from reports.analysis.progress import Progress
from reports.analysis.snapshot import Snapshot
from reports.ranked import emphasis, lowest_loss, ranking_table, tie_legend
from reports.sections import labels
from reports.sections.constraints import bound
from reports.sections.fp8_gap import DEEPSEEK_V3_BAR, Fp8Gap
from reports.sections.recommend import Recommendation, recommend
from reports.sections.start import html as start_html
from reports.sections.transfer import validation_lines

CONFIG = {"displaylogo": False, "responsive": True}
FEASIBLE, INFEASIBLE, PARETO = "#1f77b4", "#999999", "#d62728"
STYLE = """
body { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 24px;
       color: #222; max-width: 1300px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 17px; margin-top: 28px; }
.banner { background: #fff3cd; border: 1px solid #e0c36b; padding: 8px 12px; }
.note { color: #555; font-size: 13px; }
table { border-collapse: collapse; font-size: 13px; }
td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: left; }
th { background: #f3f3f3; } code { font-size: 12px; }
.grid { display: flex; flex-wrap: wrap; gap: 8px; }
"""


def render_html(snapshot: Snapshot, *, importances: Importances, gaps: list[Fp8Gap],
                prog: Progress) -> str:
    """The whole report.html document as a string."""
    body = [_title(snapshot), _recommendation(recommend(snapshot)), _header(snapshot, prog),
            start_html(snapshot)]
    body += _pareto_section(snapshot)
    body += _section("Search progress", _progress_figure(snapshot, prog), _progress_note(prog))
    body += _section("Parameter importances", _importance_figure(importances),
                     f"{importances.how()}; bars are the means, whiskers the intervals. "
                     + " ".join(importances.notes))
    body += _section("Learning curves of the best trials", _curves_figure(snapshot),
                     "Validation loss at each evaluation (EVAL_CURVE) of the best-ranked trials.")
    body += _section("Load balance and loss spikes", _balance_figure(snapshot),
                     "MaxVio = (max expert load − mean) / mean, per batch (mean over steps) and "
                     "on the validation set; loss spikes counted by the trainer [measured].")
    body += _section("fp8 vs bf16", _fp8_figure(gaps), _fp8_note(gaps))
    body.append("<h2>Transfer confidence</h2>" + "".join(
        f"<p class='note'>{inline(x)}</p>"
        for x in validation_lines(snapshot.study_user_attrs, snapshot.study_name)))
    body.append(f"<p class='note'>{html_lib.escape(labels.LEGEND).replace('*', '')}</p>")
    title = html_lib.escape(f"moetune report: {snapshot.study_name}")
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>{title}</title>"
            f"<style>{STYLE}</style>"
            f"<script type='text/javascript'>{plotly.offline.get_plotlyjs()}</script></head>"
            f"<body>{''.join(body)}</body></html>\n")


def _div(fig: go.Figure | None) -> str:
    if fig is None:
        return "<p class='note'>Nothing to plot yet.</p>"
    fig.update_layout(template="plotly_white", margin={"l": 60, "r": 20, "t": 40, "b": 50})
    div: str = fig.to_html(full_html=False, include_plotlyjs=False, config=CONFIG)
    return div


def _section(title: str, fig: go.Figure | None, note: str = "") -> list[str]:
    return [f"<h2>{html_lib.escape(title)}</h2>", f"<p class='note'>{html_lib.escape(note)}</p>",
            _div(fig)]


def _title(snapshot: Snapshot) -> str:
    out = [f"<h1>Study <code>{html_lib.escape(snapshot.study_name)}</code></h1>"]
    if snapshot.banner():
        out.append(f"<p class='banner'><b>{html_lib.escape(snapshot.banner())}</b></p>")
    return "".join(out)


def inline(text: str) -> str:
    """A ranked.md sentence as HTML: escaped, then its `code` spans and **bold** as tags (the
    sentences are written once, for both reports)."""
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", html_lib.escape(text, quote=False))
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", out)


def _header(snapshot: Snapshot, prog: Progress) -> str:
    df = snapshot.frame
    out = ["<h2>Summary</h2>"]
    counts = ", ".join(f"{n} {k}" for k, n in df["outcome"].value_counts().items())
    out.append(f"<p>{len(df)} trial(s): {html_lib.escape(counts or 'none')}; "
               f"{int(df['feasible'].sum())} feasible.</p><ul>")
    for o in snapshot.objectives:
        out.append(f"<li>Objective <code>{html_lib.escape(o.name)}</code>: {o.direction} "
                   f"({html_lib.escape(labels.quantity_label(o.name, df))})</li>")
    for key, limit in snapshot.constraints.items():  # escaping turns >= into &gt;=
        out.append(f"<li>Constraint <code>{html_lib.escape(key)}</code>: "
                   f"{html_lib.escape(bound(key, limit).text())}</li>")
    if prog.kind == "hypervolume" and prog.values and prog.reference is not None:
        ref = prog.reference.describe([o.name for o in snapshot.objectives])
        out.append(f"<li>Hypervolume of the feasible Pareto set: <b>{prog.values[-1]:.6g}</b>, "
                   f"reference point {html_lib.escape(ref)}</li>")
    out.append("</ul>" + _top_table(snapshot))
    return "".join(out)


def _top_table(snapshot: Snapshot, n: int = 10) -> str:
    """The top of the ranking, with the knee and tied columns ranked.md has (the same cells)."""
    df = ranked(snapshot.frame)
    top = df.head(n)
    if top.empty:
        return "<p><b>No feasible trial yet.</b> See ranked.md for the reasons, grouped.</p>"
    cols = [o.column for o in snapshot.objectives]
    sd = snapshot.noise_sd
    header, cells = ranking_table(top, cols, knee=len(cols) > 1, ties=sd is not None,
                                  best=lowest_loss(df))
    esc = html_lib.escape
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    rows = "".join("<tr>" + "".join(
        f"<td><code>{esc(c)}</code></td>" if h == "recipe"
        else f"<td>{emphasis(esc(c), _bold)}</td>"
        for h, c in zip(header, row, strict=True)) + "</tr>" for row in cells)
    # who is tied with the knee: said once, in the recommendation at the top
    notes = [f"<b>tied</b>: {esc(tie_legend(sd, lowest_loss(df)))}"] if sd is not None else []
    return (f"<h2>Top of the ranking</h2><table><tr>{head}</tr>{rows}</table>"
            + "".join(f"<p class='note'>{x}</p>" for x in notes))


def _bold(text: str) -> str:
    return f"<b>{text}</b>"


def _recommendation(rec: Recommendation | None) -> str:
    if rec is None:
        return "<h2>Recommendation</h2><p>No feasible trial yet: nothing to recommend.</p>"
    esc = html_lib.escape
    values = ", ".join(f"{k} = {v:.4g}" for k, v in rec.values.items())
    why = ("the best trial" if rec.single else
           "the knee of the Pareto front: the best balance of the objectives")
    parts = [f"<h2>Recommendation</h2><p><b>Run trial #{rec.trial}</b>: {inline(rec.recipe)} "
             f"({esc(values)}), {why}.</p>"]
    if rec.ties:
        parts.append(f"<p>{inline(rec.ties)}</p>")
    for title, items in (("Alternatives on the front, against it", rec.alternatives),
                         ("How sure", rec.confidence), ("Check", rec.warnings)):
        if items:
            parts.append(f"<p>{title}:</p><ul>" + "".join(f"<li>{inline(x)}</li>" for x in items)
                         + "</ul>")
    parts.append(f"<p>Launch it:</p><pre>{esc(rec.command)}</pre>")
    return "".join(parts)


def _pareto_section(snapshot: Snapshot) -> list[str]:
    pairs = series.objective_pairs(snapshot)
    if not pairs:
        return []
    figs = [_pareto_figure(snapshot, i, j) for i, j in pairs]
    note = ("Feasible trials (blue; the Pareto set in red, joined; the knee, which export "
            "--pick knee takes, ringed in black) and infeasible trials (grey ×, plotted at their "
            "recorded values). Hover a point for its recipe.")
    title = html_lib.escape(series.front_title(snapshot))
    out = [f"<h2>{title}</h2>", f"<p class='note'>{html_lib.escape(note)}</p>",
           "<div class='grid'>"]
    out += [f"<div style='flex: 1 1 600px'>{_div(f)}</div>" for f in figs]
    return out + ["</div>"]


def _pareto_figure(snapshot: Snapshot, i: int, j: int) -> go.Figure | None:
    df = series.with_values(snapshot)
    if df.empty:
        return None
    oi, oj = snapshot.objectives[i], snapshot.objectives[j]
    fig = go.Figure()
    groups = [("infeasible", ~df["feasible"].astype(bool), INFEASIBLE, "x"),
              ("feasible", df["feasible"].astype(bool) & (df["pareto_rank"] != 1), FEASIBLE,
               "circle"),
              ("Pareto set", df["pareto_rank"] == 1, PARETO, "diamond")]
    for name, mask, color, symbol in groups:
        part = df[mask.fillna(False)].sort_values(oi.column)
        if part.empty:
            continue
        fig.add_trace(go.Scatter(
            x=part[oi.column], y=part[oj.column], name=name, text=part["hover"],
            hovertemplate="%{text}<extra></extra>",
            # Only in 2-D is a front a line; with more objectives its 2-D shadow is not.
            mode="lines+markers" if name == "Pareto set" and len(snapshot.objectives) == 2
            else "markers", marker={"color": color, "symbol": symbol, "size": 9}))
    tied = df[df["tied_knee"].fillna(False).astype(bool)]
    if not tied.empty:  # within the measured noise of the knee: the data cannot order them
        fig.add_trace(go.Scatter(
            x=tied[oi.column], y=tied[oj.column], name="tied with the knee (within the noise)",
            text=tied["hover"], hovertemplate="%{text}<extra>tied with the knee</extra>",
            mode="markers", marker={"color": "rgba(0,0,0,0)", "size": 16,
                                    "line": {"color": "#777777", "width": 2, "dash": "dot"}}))
    knee = df[df["knee"].astype(bool)]
    if not knee.empty:
        fig.add_trace(go.Scatter(
            x=knee[oi.column], y=knee[oj.column], name="knee (export --pick knee)",
            text=knee["hover"], hovertemplate="%{text}<extra>knee</extra>", mode="markers",
            marker={"color": "rgba(0,0,0,0)", "size": 18,
                    "line": {"color": "#000000", "width": 2}}))
    fig.update_layout(xaxis_title=labels.axis_title(oi.name, snapshot.frame),
                      yaxis_title=labels.axis_title(oj.name, snapshot.frame),
                      title=f"{oj.name} vs {oi.name}", height=420)
    return fig


def _progress_figure(snapshot: Snapshot, prog: Progress) -> go.Figure | None:
    if not prog.values:
        return None
    fig = go.Figure()
    if prog.kind == "best":
        o = snapshot.objectives[0]
        df = series.with_values(snapshot)
        feas = df[df["feasible"].astype(bool)]
        fig.add_trace(go.Scatter(x=feas["number"], y=feas[o.column], mode="markers",
                                 name="trial", text=feas["hover"],
                                 hovertemplate="%{text}<extra></extra>",
                                 marker={"color": FEASIBLE}))
        fig.add_trace(go.Scatter(x=prog.trial_numbers, y=prog.values, mode="lines",
                                 line={"shape": "hv", "color": PARETO}, name="best so far"))
        fig.update_layout(yaxis_title=labels.axis_title(o.name, snapshot.frame))
    else:
        fig.add_trace(go.Scatter(x=prog.trial_numbers, y=prog.values, mode="lines+markers",
                                 line={"shape": "hv", "color": PARETO}, name="hypervolume"))
        fig.update_layout(yaxis_title="hypervolume (fixed reference point)")
    fig.update_layout(xaxis_title="trial number", height=360)
    return fig


def _progress_note(prog: Progress) -> str:
    if prog.kind == "best":
        return "Convergence: each feasible trial's value and the best so far."
    if prog.reference is None:
        return "No feasible trial yet: no hypervolume."
    return (f"Hypervolume of the feasible trials so far; reference point: {prog.reference.how}; "
            f"the same point for every step of the curve.")


def _importance_figure(imp: Importances) -> go.Figure | None:
    if not imp.values:
        return None
    fig = go.Figure()
    for obj, vals in imp.values.items():
        params = list(vals)
        bounds = [imp.interval(obj, p) for p in params]
        fig.add_trace(go.Bar(
            y=params, x=[vals[p] for p in params], name=obj, orientation="h",
            error_x={"type": "data", "symmetric": False,
                     "array": [hi - vals[p] for p, (_, hi) in zip(params, bounds, strict=True)],
                     "arrayminus": [vals[p] - lo for p, (lo, _) in
                                    zip(params, bounds, strict=True)]}))
    fig.update_layout(barmode="group", xaxis_title="importance (share, sums to 1 per objective)",
                      height=120 + 40 * max(len(v) for v in imp.values.values()))
    return fig


def _curves_figure(snapshot: Snapshot) -> go.Figure | None:
    curves = series.pareto_curves(snapshot)
    if not curves:
        return None
    fig = go.Figure()
    for c in curves:
        fig.add_trace(go.Scatter(x=c.tokens, y=c.val_loss, mode="lines+markers", name=c.label))
    fig.update_layout(xaxis_title="tokens seen", height=380,
                      yaxis_title=labels.axis_title("val_loss", snapshot.frame))
    return fig


def _balance_figure(snapshot: Snapshot) -> go.Figure | None:
    df = series.balance(snapshot)
    if df.empty:
        return None
    fig = make_subplots(rows=1, cols=2, subplot_titles=("MaxVio per trial", "loss spikes"))
    fig.add_trace(go.Bar(x=df["number"], y=df["max_vio_batch"], name="MaxVio (batch)"), 1, 1)
    fig.add_trace(go.Scatter(x=df["number"], y=df["max_vio_val"], mode="markers",
                             name="MaxVio (validation)"), 1, 1)
    fig.add_trace(go.Bar(x=df["number"], y=df["loss_spikes"], name="loss spikes",
                         marker={"color": "#ff7f0e"}), 1, 2)
    for key, limit in snapshot.constraints.items():  # the study's own MaxVio limits
        b = bound(key, limit)
        if b.metric in ("max_vio", "max_vio_batch"):
            fig.add_hline(y=limit, line_dash="dash", line_color="#555", row=1, col=1,
                          annotation_text=b.text())
    if not (df["loss_spikes"].fillna(0) > 0).any():
        fig.add_annotation(text="no loss spike in any trial", showarrow=False, row=1, col=2,
                           x=0.5, y=0.5, xref="x2 domain", yref="y2 domain")
    fig.update_xaxes(title_text="trial number")
    fig.update_yaxes(rangemode="tozero")
    fig.update_layout(height=360)
    return fig


def _fp8_figure(gaps: list[Fp8Gap]) -> go.Figure | None:
    if not gaps:
        return None
    names = [f"#{g.fp8_trial} vs #{g.bf16_trial}" + ("" if g.matched else " (recipes differ)")
             for g in gaps]
    colors = [INFEASIBLE if not g.matched else "#2ca02c" if g.within_bar else PARETO
              for g in gaps]
    fig = go.Figure(go.Bar(x=names, y=[100 * g.relative for g in gaps],
                           marker={"color": colors}, name="gap"))
    for y in (100 * DEEPSEEK_V3_BAR, -100 * DEEPSEEK_V3_BAR):
        fig.add_hline(y=y, line_dash="dash", line_color="#555")
    fig.update_layout(yaxis_title="(fp8 − bf16) / bf16 val_loss, %", height=340)
    return fig


def _fp8_note(gaps: list[Fp8Gap]) -> str:
    if not gaps:
        return "Not measured: the study has no finished fp8 and bf16 trials to compare."
    emulated = any(g.fp8_emulated for g in gaps)
    return (f"Dashed lines: DeepSeek-V3's bar, ±{DEEPSEEK_V3_BAR:.2%} relative. "
            + ("fp8 was emulated (quantize/dequantize): loss numerics faithful, speed not. "
               if emulated else "") + "Pairs share their recipe apart from precision; a grey "
            "bar compares the best fp8 and best bf16 trials, whose recipes differ, so its gap "
            "is not a precision effect.")
