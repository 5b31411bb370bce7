"""A law study's report: each budget's optimum, the lr and batch laws, the held-out check, the
full run's extrapolation beside the published laws and recipes.

``law.md`` and ``law.png`` in budget 0's run folder (``law/``), from the budget studies' own data
(`tuner.study.workflows.law_fit`). The figure: x (tokens, or compute C in standard parametrization)
against lr* and B*: the budgets' optima with their bootstrap intervals, best-of-n beside them
(hollow), the fitted law extended to the full run with its band there, DeepSeek LLM's law at
the full run's C and the target's published recipe as points at the full run's x.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reports.html import inline
from tuner.export.answers import law_full_run
from tuner.modeling.anchor.backtest import backtest_markdown, shipped_backtest
from tuner.modeling.cost_model import count_params, non_embedding_flops_per_token
from tuner.modeling.full_run import LAW_BAND_LIMIT
from tuner.modeling.laws import power_law as pl
from tuner.modeling.laws.forms import read_lr_law
from tuner.modeling.laws.pooled_law import LACK_OF_FIT_P
from tuner.modeling.published_recipes import published_recipe
from tuner.study.specs.spec import StudySpec
from tuner.study.store import database as db
from tuner.study.workflows.law_fit import LawFit, budget_studies, fit_law

if TYPE_CHECKING:
    import optuna


def full_run_view(fit: LawFit, spec: StudySpec,
                  studies: list[tuple[int, optuna.Study]]) -> dict[str, Any] | None:
    """The full run's answer as ``moetune export`` of this law writes it for the spec's
    ``[full_run]`` (`tuner.export.answers.law_full_run`: the same function, so law.md, the
    terminal line and the service's page cannot say another LR), with the team's law read
    there, the prior it was combined with, and DeepSeek LLM's law and the target's published
    recipe beside them; None without a target or a law yet."""
    full = law_full_run(spec, studies, fit)
    if full is None or full.answer is None or fit.lr_law is None:
        return None
    a, t = full.answer, full.target
    m_full = non_embedding_flops_per_token(full.model_args, t.seq_len)
    tokens = float(t.tokens)
    x = fit.x(tokens, m_full)
    law = a.law
    out: dict[str, Any] = {
        "target": spec.full_run_target, "tokens": tokens, "x": x, "compute": m_full * tokens,
        "lr": a.lr, "lr_band": list(a.band), "lr_at_batch": a.batch,
        "lr_batch_rule": next(r.rule for r in full.rules if r.field == "batch_end"),
        "answer": a.to_dict(), "answer_rule": a.rule(),
        "law_lr": law.lr if law else None, "law_band": list(law.band) if law else None,
        "law_refusal": law.refusal if law else "",
        "decades_past": law.decades_tokens if law else fit.lr_law.decades_past(x),
        "decades_past_batch": law.decades_batch if law else None,
        "batch": a.batch, "deepseek_llm_lr": pl.deepseek_llm_lr(m_full * tokens),
        "deepseek_llm_batch": pl.deepseek_llm_batch(m_full * tokens),
        "width_mult": a.width_mult if spec.law.mup else None}
    if full.batch_answer is not None:
        out["batch_band"] = list(full.batch_answer.band)
    if fit.lr_batch is not None:
        out |= {"lr_in_d": fit.lr_law.at(x), "lr_in_d_band": list(fit.lr_law.band(x))}
    c = count_params(full.model_args)
    out["params"] = float(c.active - c.embedding - c.head)  # as the proxy's `params` counts
    rec = published_recipe(spec.full_run_target)
    if rec is not None:
        out["published"] = {"name": rec.name, "lr": rec.lr, "batch": rec.batch_tokens,
                            "source": rec.source}
    return out


def law_data(spec: StudySpec, url: str,
             loaded: Mapping[str, optuna.Study] | None = None) -> dict[str, Any]:
    """Everything ``law.md`` says, as numbers (budgets' studies in ``loaded``, by name, are
    read as given: a run that has just run them passes them)."""
    studies = budget_studies(spec, db.open_existing_storage(url), loaded)
    fit = fit_law(spec, studies)
    return fit.to_dict() | {"full_run": full_run_view(fit, spec, studies), "mup": spec.law.mup}


ONE_SIDED = 1.25  # judged held-out cells all on one side, missed by more than this on
                  # geometric average: said


def num(v: Any, fmt: str = ".3g") -> str:
    return "—" if v is None or (isinstance(v, float) and not math.isfinite(v)) \
        else format(v, fmt)


def _span(pair: Any, fmt: str = ".3g") -> str:
    return "—" if not pair else f"{num(pair[0], fmt)}–{num(pair[1], fmt)}"


def law_markdown(data: dict[str, Any]) -> str:
    var = "D (tokens)" if data["variable"] == "tokens" else "C = M·D (FLOPs)"
    lines = [f"# Law {data['name']}: the optimal lr and batch against {var}", ""]
    lines += _answer(data) + [""] + _prior_backtest(data)
    lines += ["## Each budget's optimum, from all its trials", "",
              "Surface: a quadratic in log lr and log batch fitted to every feasible trial; "
              "interval: 95% of a parametric bootstrap; "
              "near-optimal: where the surface stays within the noise of its minimum. "
              "Best-of-n (the single best trial) beside it.", "",
              "| budget | tokens | C (FLOPs) | trials | lr* [95%] | near-optimal lr | "
              "B* tokens [95%] | loss* | best-of-n lr / B / loss | noise sd |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for b in data["budgets"]:
        o, best = b["optimum"], b["best"]
        tag = (" (held out)" if b["held_out"] else
               " (held-out batch)" if b.get("held_out_batch") else "")
        if o is None:
            lines.append(f"| {b['index']}{tag} | {b['tokens']} | {num(b['compute'])} | "
                         f"{b['n_trials']} | no optimum: {b['error']} | | | | | |")
            continue
        sd = num(b["noise_sd"]) + " measured" if b["noise_sd"] else \
            num(o["tolerance"]) + " (fit residual)"
        batch = (f"{num(o['batch'], '.0f')} [{_span(o['batch_interval'], '.0f')}]"
                 if o["batch_placed"] else f"{num(o['batch'], '.0f')} (not placed)")
        edge = f" at the edge: {', '.join(o['at_edge'])}" if o["at_edge"] else ""
        lines.append(
            f"| {b['index']}{tag} | {b['tokens']} | {num(b['compute'])} | {b['n_trials']} | "
            f"{num(o['lr'])} [{_span(o['lr_interval'])}]{edge} | {_span(o['near_lr'])} | "
            f"{batch} | {num(o['loss'], '.4f')} | {num(best.get('lr'))} / "
            f"{num(best.get('batch'), '.0f')} / {num(best.get('loss'), '.4f')} | {sd} |")
    lines += [""] + _laws(data) + [""] + lr_batch_lines(data) + [""] + _held(data)
    lines += _held_batch(data) + [
        "", "![lr* and B* against the budget]"
                                                        "(law.png)", ""]
    return "\n".join(lines)


def lr_batch_lines(data: dict[str, Any]) -> list[str]:
    """law.md's section on the lr law in tokens and batch: its form, cells and value at the
    largest cell, with what the form itself says of its fit and of its D x B term
    (`tuner.modeling.laws.interface.LrForm`, read by its form: `forms.read_lr_law`)."""
    head = ["## lr* in tokens and batch", ""]
    d = data.get("lr_batch_law")
    if not d:
        note = data.get("lr_batch_note") or "not fitted"
        return head + [f"No law in tokens and batch: {note}. This law's lr holds at the batch "
                       "it was measured at only; an export at another batch refuses it."]
    law = read_lr_law(d)
    (d0, d1), (b0, b1) = law.tokens_range, law.batch_range
    notes = "".join(f"{n} " for n in law.notes())
    return head + [
        f"Modeled: lr* {law.describe()}, through {law.n_cells} "
        f"(budget, batch) cells (D {d0:.4g}–{d1:.4g} tokens, B {b0:.4g}–{b1:.4g} tokens per "
        f"step). {notes}At the largest budget and batch: lr* "
        f"{law.at(d1, b1):.3g}, band {_span(law.band(d1, b1))}."] + law.term_lines(
            _full_run_point(data))


def _full_run_point(data: dict[str, Any]) -> tuple[float, float] | None:
    """The full run's (tokens, batch) where law.md's data holds them: the batch the LR is
    read at, else the final batch."""
    full = data.get("full_run") or {}
    batch = full.get("lr_at_batch") or full.get("batch")
    return (full["tokens"], batch) if batch and full.get("tokens") else None


def _answer(data: dict[str, Any]) -> list[str]:
    full = data.get("full_run")
    if not full:
        return ["No law yet (it needs 2 budgets with an optimum), or no [full_run] target: "
                "no full-run answer."]
    a = full["answer"]
    lo, hi = full["lr_band"]
    head = (f"**Full run** ({full['target']}, {full['tokens']:.3g} tokens, final batch "
            f"{full['lr_at_batch']:,.0f} tokens per step): ")
    if pinned(full):
        head += (f"**lr {num(full['lr'])}** (95% band {_span(full['lr_band'])}, "
                 f"{hi / lo:.2f}x), what `moetune export` of this law writes.")
    else:
        head += (f"**the LR is not pinned**: lr {num(full['lr'])}, 95% band "
                 f"{_span(full['lr_band'])}, {hi / lo:.3g}x wide (more than "
                 f"{LAW_BAND_LIMIT:g}x), so `moetune export` refuses it (give --lr, or "
                 "--lr-wide-band to write it labelled with its band).")
    out = [head, "", f"How: {full['answer_rule']}", ""]
    if full["law_lr"] is not None:
        llo, lhi = full["law_band"]
        out.append(f"The team's law alone there: lr {num(full['law_lr'])} (band "
                   f"{_span(full['law_band'])}, {lhi / llo:.3g}x wide), "
                   f"{full['decades_past']:.1f} decades past the fitted budgets in D"
                   + (f" and {full['decades_past_batch']:.1f} in B"
                      if full.get("decades_past_batch") is not None else "")
                   + f"; its weight in the answer: {a['law_weight']:.0%}.")
    elif full.get("law_refusal"):
        out.append(f"The team's law gives no LR at this batch: {full['law_refusal']}")
    out.append(f"Final batch: {full['lr_batch_rule']}.")
    if "lr_in_d" in full:
        out.append(f"The lr law in D alone, through each budget's optimum at the batch it sat "
                   f"at, gives {num(full['lr_in_d'])} there: an LR without its batch, not this "
                   "answer.")
    if full.get("width_mult"):
        mult = full["width_mult"]
        out.append(f"The lr is µP's base lr (the proxy's width); the full run's hidden matrices "
                   f"train at lr / width_mult = {num(full['lr'] / mult)} (width_mult "
                   f"{mult:g}): that is the LR to set beside a published single LR.")
    elif data["mup"]:
        out.append("The lr is µP's base lr (the proxy's width); the full run's hidden matrices "
                   "train at lr / width_mult.")
    out += _regime(data)
    pub = full.get("published")
    out.append(f"Beside it: DeepSeek LLM's law at C = {full['compute']:.3g} gives lr "
               f"{num(full['deepseek_llm_lr'])}, batch {num(full['deepseek_llm_batch'], '.4g')} "
               f"tokens" + (f"; {pub['name']} published lr {num(pub['lr'])}, batch "
                            f"{num(pub['batch'], '.4g')} tokens ({pub['source']})."
                            if pub else "."))
    return out


def _prior_backtest(data: dict[str, Any]) -> list[str]:
    """The prior the answer starts from, backtested over the recipe table (each recipe, and
    each family, left out: `tuner.modeling.anchor.backtest`, as `moetune law backtest`)."""
    if not data.get("full_run"):
        return []
    return ["## The prior the answer starts from, backtested", "",
            f"{data['full_run']['answer']['prior_forms']}. Each published recipe predicted by "
            "the prior fitted without it (its family's other runs placing the lab), and without "
            "its whole family (a new lab); modeled: published LRs are what labs chose.", "",
            backtest_markdown(list(shipped_backtest())), ""]


def answer_line(data: Mapping[str, Any]) -> str:
    """law.md's answer in one line, for the terminal at the end of a law's run or report: the
    full run's lr with its band (the export's, anchored on the published recipes), or that it
    is not pinned; the team's law's weight in it; the held-out check."""
    full = data.get("full_run")
    if not full:
        return f"law {data['name']}: no full-run answer yet (law.md says why)."
    lo, hi = full["lr_band"]
    a = full["answer"]
    line = (f"law {data['name']}: full run ({full['target']}, {full['tokens']:.3g} tokens, "
            f"{full['lr_at_batch']:.4g} tokens per step): "
            + (f"lr {num(full['lr'])}, band {num(lo)}-{num(hi)}" if pinned(full) else
               f"the LR is not pinned (lr {num(full['lr'])}, band {hi / lo:.3g}x wide; the "
               "export refuses it)")
            + f", the published recipes' prior moved by the team's law at weight "
            f"{a['law_weight']:.0%} ({full['decades_past']:.1f} decades past its budgets in D)"
            + ("; THE LAW AND THE PRIOR DISAGREE" if a["disagree"] else ""))
    h = data.get("held_out_check") or {}
    cells = [] if "at_batch" in h else [  # at one batch, the check is that one cell
        c for c in h.get("cells", [])
        if "lr_ratio" in c and not c.get("at_edge") and not c.get("censored")]
    if cells:  # a grid: lr*(D, B) at each batch the held-out budget searched
        line += ("; held-out budget: lr*(D, B) predicted / measured "
                 + ", ".join(f"{c['lr_ratio']:.2f}" for c in cells) + " at "
                 + ", ".join(f"{c['batch']:.0f}" for c in cells) + " tokens per step, "
                 + ("each inside its band" if all(c["lr_inside"] for c in cells)
                    else "NOT ALL inside their bands"))
    elif h:
        line += (f"; held-out budget: predicted / measured lr {h['lr_ratio']:.2f}, "
                 + ("inside its band" if h["lr_inside"] else "OUTSIDE its band"))
    return line + " (law.md)."


def pinned(full: Mapping[str, Any]) -> bool:
    """Whether the answer's band at the full run is narrow enough for its point to be an
    answer: within `LAW_BAND_LIMIT`, the width past which `moetune export` refuses the LR."""
    lo, hi = full["lr_band"]
    return bool(hi / lo <= LAW_BAND_LIMIT)


def _regime(data: dict[str, Any]) -> list[str]:
    """Where the budgets sit against the full run in tokens per parameter (non-embedding,
    active): a law fitted far below the full run's ratio is extrapolated in regime too, not only
    in D (on this CPU's proxy lr* fell faster past about 5 tokens per parameter than the law
    through the budgets below it said: benchmarks/RESULTS.md, "The shipped law design on real
    trainings")."""
    n, full = data.get("params"), data.get("full_run") or {}
    if not n or not full.get("params"):
        return []
    fitted = [b["tokens"] / n for b in data["budgets"]
              if not b["held_out"] and not b.get("held_out_batch")]
    held = [b["tokens"] / n for b in data["budgets"] if b["held_out"]]
    return [f"Tokens per parameter (non-embedding, active): the fitted budgets train the proxy "
            f"(N = {n:,.0f}) on {fitted[0]:.3g}–{fitted[-1]:.3g}"
            + (f", the held-out budget on {held[0]:.3g}" if held else "")
            + f"; the full run trains N = {full['params']:.3g} on "
            f"{full['tokens'] / full['params']:.3g}. An lr* fitted below the full run's ratio "
            "is extrapolated in regime as well as in D."]


def _laws(data: dict[str, Any]) -> list[str]:
    lr, b = data["lr_law"], data["batch_law"]
    if lr is None:
        return ["## Laws", "", "No lr law: fewer than 2 fitted budgets have an lr optimum "
                "inside their searched range (widen the range where the optimum sits on its "
                "edge)."]
    x = "D" if data["variable"] == "tokens" else "C"
    held_in = data.get("held_out_in_law", False)
    fitted = [b["index"] for b in data["budgets"] if held_in or not b["held_out"]]
    left = {name: [i for i in fitted if i not in data[f"{name}_budgets"]]
            for name in ("lr", "batch")}
    pooled = data.get("lr_method") == "pooled"
    edge = "no optimum, or its optimum on the searched range's edge, so beyond it"
    how = ("lr: pooled — one surface over every trial of budgets "
           f"{data['lr_budgets']}, its bowls' bottoms on the law (a budget whose optimum sits "
           "on its range's edge still counts)" if pooled else
           f"lr: a line through the optima of budgets {data['lr_budgets']} (left out, {edge}: "
           f"{left['lr'] or 'none'})")
    below = data.get("batch_below_range")
    how_b = (f"batch: a line through the optima of budgets {data['batch_budgets']} (left out, "
             f"{edge}: {left['batch'] or 'none'})" if b is not None else
             f"batch: **no law — every budget's optimum sits at the smallest batch it searched "
             f"(up to {below:.0f} tokens)**: at these budgets this proxy wants more steps, not "
             "larger batches, and its optimal batch lies below the range; search smaller "
             "batches, or fix the batch so that the lr law is pooled over every trial (sharper)"
             if below else
             "batch: no law (the batch not searched, or fewer than 2 budgets place it)")
    title = ("## Laws (every budget: the held-out one joined them after its check)" if held_in
             else "## Laws (fitted budgets only)")
    out = [title, "", f"{how}; {how_b}.", "",
           f"- lr*({x}) = {lr['coef']:.3g}·{x}^{lr['exponent']:.3f}, exponent 95% "
           f"[{lr['exponent_interval'][0]:.3f}, {lr['exponent_interval'][1]:.3f}]"]
    if pooled:
        p = data["pooled"]["lack_of_fit_p"]
        for gone in data.get("lr_left_out", []):
            out.append(f"- Budget {gone['index']} left out of the lr law: with it, one power "
                       f"law did not hold (lack of fit p = {gone['lack_of_fit_p']:.2g}); the "
                       "smallest budgets bend first (few steps, mostly warmup).")
        line = data.get("lr_line")
        out.append(f"- Does one power law hold? Lack of fit against each budget's own optimum: "
                   f"p = {p:.2g}" + (" — **the budgets' optima do not lie on one power law**; "
                                      "the band assumes they do, so it is too narrow"
                                      if p < LACK_OF_FIT_P else " (no evidence against it)"))
        out.append("- Beside it, the line through the budgets' own optima: " + (
            f"exponent {line['exponent']:.3f} [{line['exponent_interval'][0]:.3f}, "
            f"{line['exponent_interval'][1]:.3f}]" if line else
            "none (fewer than 2 optima inside their ranges)"))
    if b is not None:
        out.append(f"- B*({x}) = {b['coef']:.3g}·{x}^{b['exponent']:.3f} tokens, exponent 95% "
                   f"[{b['exponent_interval'][0]:.3f}, {b['exponent_interval'][1]:.3f}]")
    out.append("- Published, for comparison: DeepSeek LLM lr ∝ C^−0.125, B ∝ C^0.327 "
               "(standard parametrization, across model sizes); Step Law lr ∝ N^−0.713·D^0.307, "
               "B ∝ D^0.571 (at one N, the D exponents are the ones to compare).")
    return out


def _held_unchecked(data: dict[str, Any]) -> str:
    """Why the held-out check has no row yet: not started, interrupted, or no optimum."""
    held = next((b for b in data["budgets"] if b.get("held_out")), None)
    if held is None:
        return "Not run yet (or no held_out in [law])."
    p = data["predicted"] or {}
    said = (f"predicted before it ran: lr {num(p.get('lr'))} [{_span(p.get('lr_band'))}]"
            if p.get("lr") else "no stored prediction")
    if not held.get("finished"):
        n = held["n_trials"]
        return (f"Interrupted before its search ended ({n} trial{'s' * (n != 1)} with a result; "
                f"{said}). `moetune resume {data['name']}` finishes it; the check is made once "
                "it has an optimum.")
    return f"Searched, but no optimum placed ({held['error']}); {said}."


def _held_row(h: dict[str, Any]) -> str:
    """The held-out budget's lr row: the lr law's, or lr*(D, B) at the one batch it searched
    (``law.held_out_at_batch``)."""
    if "at_batch" not in h:
        return "lr"
    return f"lr at B = {h['at_batch']:.0f} tokens, the one batch searched (lr*(D, B))"


def _held(data: dict[str, Any]) -> list[str]:
    h = data["held_out_check"]
    if h is None:
        return ["## Held-out budget", "", _held_unchecked(data)]
    out = ["## Held-out budget: predicted before it ran, then searched on its own", "",
           "| | predicted [band] | measured optimum [95%] | predicted / measured |",
           "|---|---|---|---|",
           f"| {_held_row(h)} | {num(h['lr_predicted'])} [{_span(h['lr_band'])}] | "
           f"{num(h['lr_measured'])} "
           f"[{_span(h['lr_interval'])}] | {h['lr_ratio']:.2f} |"]
    if "batch_predicted" in h:
        out.append(f"| B (tokens) | {num(h['batch_predicted'], '.0f')} "
                   f"[{_span(h['batch_band'], '.0f')}] | {num(h['batch_measured'], '.0f')} "
                   f"[{_span(h['batch_interval'], '.0f')}] | {h['batch_ratio']:.2f} |")
    for c in h.get("cells", []) if "at_batch" not in h else []:  # else the row above
        measured = (f"{num(c['lr_measured'])} [{_span(c['lr_interval'])}]"
                    + (" (at the range's edge)" if c["censored"] else "")
                    + (" (its quadratic's bottom on its window's edge: a flat bowl, no "
                       "optimum placed)" if c.get("at_edge") else "")
                    if "lr_measured" in c else f"no optimum: {c['error']}")
        cell_ratio = f"{c['lr_ratio']:.2f}" if "lr_ratio" in c else "—"
        out.append(f"| lr at B = {c['batch']:.0f} tokens (lr*(D, B)) | {num(c['lr'])} "
                   f"[{_span(c['lr_band'])}] | {measured} | {cell_ratio} |")
    if "lr_today_rule" in h:
        out.append(f"| lr, today's rule (smallest budget's best-of-n × (C ratio)^−0.125) | "
                   f"{num(h['lr_today_rule'])} | {num(h['lr_measured'])} | "
                   f"{h['lr_today_ratio']:.2f} |")
    missed = [k for k in ("lr", "batch") if not h.get(f"{k}_inside", True)]
    unplaced = [c for c in h.get("cells", []) if c.get("at_edge") or c.get("censored")]
    missed += [f"lr at B = {c['batch']:.0f}" for c in h.get("cells", [])
               if not c.get("lr_inside", True) and c not in unplaced]
    out += ["", (f"**The law missed its own check**: the {' and the '.join(missed)} optimum this "
                 "budget found lies outside the band predicted for it: the optimum does not "
                 "follow one power law that far, or the band understates its uncertainty, so "
                 "the band at the full run is too narrow (the export warns)." if missed else
                 "The optimum this budget found lies inside the band predicted for it.")]
    if unplaced:
        out[-1] += (" Not judged: " + ", ".join(f"lr at B = {c['batch']:.0f}" for c in unplaced)
                    + ", whose trials place no optimum (on the searched range's or its "
                    "window's edge); a wider lr range at that batch would.")
    judged = [c for c in h.get("cells", []) if "lr_ratio" in c and c not in unplaced]
    out += _one_sided(judged)
    if data.get("held_out_in_law"):
        out.append("")
        out.append("Its search has ended, so the budget now counts in the laws above (the "
                   "prediction here was made without it, before it ran).")
    out += _recipe_gap(h, "budget")
    ratio = data.get("compute_ratio")
    if ratio is not None:
        out += ["", f"Compute of the fitted budgets against a direct search at the held-out "
                    f"budget with as many trials: {ratio:.3f}."]
    return out


def _one_sided(judged: list[dict[str, Any]]) -> list[str]:
    """Where the judged held-out cells all miss on the same side, by more than `ONE_SIDED` on
    their geometric average, say so: bands that each hold their cell do not show that the law's
    point leaned one way past the fitted budgets. An average, not every cell past the line: on
    this CPU's grid one seed's cells were all high, two by well over the line and one by less,
    a lean a rule asking every cell past the line does not see (benchmarks/RESULTS.md, "The
    shipped law design on real trainings"). Nothing is claimed about further out in D: one
    budget further on, this CPU's lr* flattened after its fall (benchmarks/RESULTS.md, "One
    budget further")."""
    if len(judged) < 2:
        return []
    ratios = [c["lr_ratio"] for c in judged]
    mean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    high = all(r > 1 for r in ratios) and mean > ONE_SIDED
    low = all(r < 1 for r in ratios) and mean < 1 / ONE_SIDED
    if not (high or low):
        return []
    misses = [max(r, 1 / r) for r in ratios]
    return ["", f"**lr*(D, B) lies {'above' if high else 'below'} the measured optimum in "
                f"every judged cell** ({len(ratios)} of {len(ratios)}, {min(misses):.2f}x-"
                f"{max(misses):.2f}x, {max(mean, 1 / mean):.2f}x on geometric average): past the "
                f"fitted budgets the measured lr* is {'lower' if high else 'higher'} at every "
                "batch than lr*(D, B) carried it to. "
                + ("Each band held its cell, but the point leaned "
                   if all(c.get("lr_inside", True) for c in judged) else "The point leaned ")
                + f"{'high' if high else 'low'}. Whether lr* keeps moving that fast further out "
                "in D, no cell here measures: it can flatten again, so read the band there, not "
                "the point."]


def _held_batch(data: dict[str, Any]) -> list[str]:
    """law.md's held-out batch: predicted (lr*(D, B) of the fitted cells, before it ran) /
    measured (its own search at that batch); nothing without one."""
    hob = next((b for b in data["budgets"] if b.get("held_out_batch")), None)
    if hob is None:
        return []
    out = ["", "## Held-out batch: predicted before it ran, then searched on its own", ""]
    h = data.get("held_out_batch_check")
    if h is None:
        why = f"no optimum placed ({hob['error']})" if hob["error"] else "its search has not ended"
        return out + [f"No check yet: {why}."]
    past = h.get("decades_past") or {}
    out += [f"At {h['tokens']} tokens ({_hob_budget(data, h)}) and {h['batch']:.0f} tokens "
            f"per step ({h['tokens'] / h['batch']:.0f} steps; "
            f"{past.get('batch', 0):.2f} decades past the fitted batches):", "",
            "| | predicted [band] | measured optimum [95%] | predicted / measured |",
            "|---|---|---|---|",
            f"| lr | {num(h['lr_predicted'])} [{_span(h['lr_band'])}] | "
            f"{num(h['lr_measured'])} [{_span(h['lr_interval'])}] | {h['lr_ratio']:.2f} |", "",
            *_estimators(h),
            ("The optimum this batch found lies inside the band predicted for it."
             if h["lr_inside"] else "**The law in tokens and batch missed its own check**: "
             "the optimum this batch found lies outside the band predicted for it, so the band "
             "at the full run's batch is too narrow.")
            + (f" Its optimum sits on the searched range's edge ({', '.join(h['at_edge'])}): "
               "the measured value is a bound." if h["at_edge"] else ""),
            *_recipe_gap(h, "held-out batch")]
    return out


def _hob_budget(data: dict[str, Any], h: dict[str, Any]) -> str:
    """Which budget the held-out batch ran at, as law.md says it."""
    held = next((b for b in data["budgets"] if b.get("held_out")), None)
    if held is None or held["tokens"] != h["tokens"]:
        return "the largest fitted budget"
    if data.get("held_out_in_law"):
        return "the held-out budget, which joined the law after its check"
    return "the held-out budget, not in the law: its check placed no lr optimum"


def _recipe_gap(h: dict[str, Any], what: str) -> list[str]:
    """What following the prediction cost: the predicted recipe's measured val_loss against
    the optimum of the ``what``'s own search (fitted) and its best searched trial (measured);
    nothing without a predicted trial."""
    if "loss_gap" not in h:
        return []
    kind = "measured noise sd" if h["sd_measured"] else "sd of the fit's residuals"
    out = ["", f"The predicted recipe's val_loss {h['loss_predicted_recipe']:.4f} "
               f"(measured) against the {what}'s optimum {h['loss_optimum']:.4f} (the "
               f"surface's minimum, fitted): {h['loss_gap']:+.4f} = "
               f"{h['loss_gap_sd']:+.2f} sd ({kind} {h['sd']:.3g}) = "
               f"{h['loss_gap_pct']:+.2f}%."]
    if "loss_gap_best" in h:
        out[-1] += (f" Against the best of its searched trials, {h['loss_best_searched']:.4f} "
                    f"(measured, a best of n: biased low): {h['loss_gap_best']:+.4f} = "
                    f"{h['loss_gap_best_sd']:+.2f} sd = {h['loss_gap_best_pct']:+.2f}%.")
    if h.get("floor_below_trials"):
        out += ["", f"**The surface's minimum lies more than 2 sd below every trial of this "
                    f"{what}**: the quadratic does not describe the bottom of its bowl, so "
                    "the gap to it is the fit's; read the measured comparison."]
    return out


def _estimators(h: dict[str, Any]) -> list[str]:
    """The measured optimum's two estimates: the cells' (as the law's cells are found) and the
    budget's whole-range quadratic; where they differ by more than 1.5x the bowl is flat and
    the measured lr* is not pinned closer than that."""
    surface = h.get("lr_surface")
    if not surface:  # a law.json written before the check used the cells' estimator
        return []
    spread = h["estimator_spread"]
    line = (f"Measured as the law's cells are (a quadratic in log lr near the best trial); the "
            f"whole-range quadratic through the same trials puts the optimum at {num(surface)} "
            f"[{_span(h['lr_surface_interval'])}], {spread:.2f}x from it"
            + (": the bowl is flat over that span within the noise, so this check cannot pin "
               "lr* closer than that." if spread > 1.5 else "."))
    return [line, ""]


def law_figure(data: dict[str, Any], path: Path) -> Path:
    """``law.png``: lr* and B* against the budget (module docstring)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    full = data.get("full_run")
    xs = [(b["tokens"] if data["variable"] == "tokens" else b["compute"], b)
          for b in data["budgets"] if b["optimum"] and not b.get("held_out_batch")]
    for ax, key, law, unit in ((axes[0], "lr", data["lr_law"], "lr*"),
                               (axes[1], "batch", data["batch_law"], "B* (tokens)")):
        if key == "batch" and not any(b["optimum"]["batch_placed"] for _, b in xs):
            ax.axis("off")  # one batch per budget: nothing placed, nothing to draw
            ax.text(0.5, 0.5, "batch not placed at any budget (fixed, or too few batches "
                    "searched): no batch law", ha="center", va="center", fontsize=9,
                    transform=ax.transAxes)
            continue
        for x, b in xs:
            o = b["optimum"]
            lo, hi = o[f"{key}_interval"]
            color = "tab:red" if b["held_out"] else "tab:blue"
            ax.errorbar([x], [o[key]], yerr=[[o[key] - lo], [hi - o[key]]], fmt="o",
                        color=color, capsize=3,
                        label="held-out optimum" if b["held_out"] else None)
            if b["best"]:
                ax.plot([x], [b["best"][key]], "o", mfc="none", color="gray")
        if law is not None:
            top = full["x"] if full else max(x for x, _ in xs) * 10
            grid = np.logspace(math.log10(min(x for x, _ in xs)), math.log10(top), 60)
            pooled = key == "lr" and data.get("lr_method") == "pooled"
            ax.plot(grid, law["coef"] * grid ** law["exponent"], color="tab:blue",
                    label=f"{'pooled ' if pooled else ''}fit: exponent {law['exponent']:.3f}")
            line = data.get("lr_line") if pooled else None
            if line:
                ax.plot(grid, line["coef"] * grid ** line["exponent"], "--", color="gray",
                        label=f"line through the optima: {line['exponent']:.3f}")
        if full and key in full:
            lo, hi = full[f"{key}_band"]
            what = (f"lr*(D, B) at the full run's {full['lr_at_batch']:.3g} tokens per step"
                    if key == "lr" and "lr_at_batch" in full else "law at the full run")
            if key == "lr" and not pinned(full):  # a band of many decades would flatten the rest
                ax.plot([full["x"]], [full[key]], "s", mfc="none", color="tab:blue",
                        label=f"lr*(D, B) at the full run: not pinned (band "
                              f"{math.log10(hi / lo):.0f} decades)")
            else:
                ax.errorbar([full["x"]], [full[key]], yerr=[[full[key] - lo], [hi - full[key]]],
                            fmt="s", color="tab:blue", capsize=3, label=what)
            ax.plot([full["x"]], [full[f"deepseek_llm_{key}"]], "^", color="tab:green",
                    label="DeepSeek LLM's law at the full run")
            if "published" in full:
                ax.plot([full["x"]], [full["published"][key]], "*", ms=12, color="tab:orange",
                        label=f"{full['published']['name']} published")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("tokens D" if data["variable"] == "tokens" else "compute C (FLOPs)")
        ax.set_ylabel(unit)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_title(f"{data['name']}: optima (hollow: best-of-n)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def budget_note(data: dict[str, Any], law_dir: str = "../law") -> list[str]:
    """What budget 0's own ranked.md and report.html say first: the answer is the law's (its
    report in ``law_dir``, relative to theirs)."""
    lines = [f"**This study is budget 0 of the law study {data['name']}**: the full run's answer "
             f"is the law's ({law_dir}/law.md, {law_dir}/law.png), not this budget's best trial, "
             f"which is the best recipe at {data['budgets'][0]['tokens']} tokens per trial only."]
    return lines + _answer(data)


def annotate_budget_report(report_dir: Path, data: dict[str, Any],
                           law_dir: Path | None = None) -> None:
    """Put `budget_note` under the title of budget 0's ranked.md and report.html (written just
    before by `reports.build`); the figure is the law's own ``law.png``, in ``law_dir``
    (default: the folder ``law`` beside ``report_dir``)."""

    rel = Path(os.path.relpath(law_dir, report_dir)).as_posix() if law_dir else "../law"
    note = budget_note(data, rel)
    md = report_dir / "ranked.md"
    if md.exists():
        head, _, rest = md.read_text().partition("\n")
        md.write_text(head + "\n\n" + "\n\n".join(note) + "\n" + rest)
    page = report_dir / "report.html"
    if page.exists():
        text = page.read_text()
        block = ("<h2>Scaling law</h2>" + "".join(f"<p>{inline(n)}</p>"
                                                   for n in note)
                 + f"<p><img src='{html.escape(rel, quote=True)}/law.png' alt='lr* and B* "
                   "against the budget' style='max-width:100%'></p>")
        i = text.find("</h1>")
        if i >= 0:
            page.write_text(text[:i + 5] + block + text[i + 5:])


def write_law_report(spec: StudySpec, *, url: str, out: Path,
                     budget_report: Path | None = None,
                     loaded: Mapping[str, optuna.Study] | None = None) -> dict[str, Path]:
    """Write ``law.md``, ``law.json`` and ``law.png`` under ``out``; their paths. With
    ``budget_report`` (budget 0's report folder), annotate its reports (`budget_note`)."""
    import json

    data = law_data(spec, url, loaded)
    out.mkdir(parents=True, exist_ok=True)
    md = out / "law.md"
    md.write_text(law_markdown(data))
    js = out / "law.json"
    js.write_text(json.dumps(data, indent=2, default=float) + "\n")
    paths = {"md": md, "json": js, "png": law_figure(data, out / "law.png")}
    if budget_report is not None:
        annotate_budget_report(budget_report, data, out)
    return paths
