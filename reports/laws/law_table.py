"""``moetune law fit``'s report: the law in tokens and batch from a table of runs, as law.md,
law.json and law.png.

The fit is `tuner.modeling.laws.lr_batch_law` on the table's cells (`reports.laws.run_table`): each
(N, D, B) cell's lr optimum, the law lr*(D, B) [× N^cN with several model sizes] with its band,
and the batch optimum B*(D) where the grid places it. law.json carries the law as
``lr_batch_law`` (`LrBatchLaw.to_dict`, read back by `LrBatchLaw.from_dict`). The figure: lr*
against B, one colour per (N, D) row, the cells' optima with their ±2 se, the law's line and
band across the fitted batches.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from reports.laws.run_table import RunTable, TableCells, table_cells
from tuner.modeling.laws.lr_batch_law import (
    LawFitError,
    LrBatchLaw,
    fit_batch_optimum,
    fit_lr_batch_law,
)

MAX_NAMED = 4  # skipped cells a failed fit's error names one by one (the rest counted)


def table_law_data(table: RunTable, *, seed: int = 0) -> dict[str, Any]:
    """Everything law.md says, as numbers.

    Raises:
        LawFitError: no law can be fitted; it names the cells left without an optimum and
            why, since those are what a user must fix (a sweep too short to fit a bowl).
    """
    tc = table_cells(table, seed=seed)
    try:
        law = fit_lr_batch_law(tc.cells)
    except LawFitError as e:
        raise LawFitError(f"{e}{skipped_words(tc.skipped, len(tc.cells))}") from None
    return {"source": table.describe(), "lr_batch_law": law.to_dict(),
            "cells": [_cell(c, law) for c in tc.cells], "skipped": list(tc.skipped),
            "batch_optimum": fit_batch_optimum(tc.cells).to_dict(),
            "exponents": _exponents(law, tc)}


def skipped_words(skipped: tuple[dict[str, Any], ...], placed: int) -> str:
    """``; 3 of 3 cells have no lr optimum: N 1e+08, D 1e+09, B 2.05e+03 (5 runs): ...``,
    or '' when none was skipped."""
    if not skipped:
        return ""
    named = [f"N {_g(s['N'])}, D {_g(s['D'])}, B {_g(s['B'])} ({s['runs']} runs): "
             f"{str(s['why']).rstrip('.')}" for s in skipped[:MAX_NAMED]]
    more = len(skipped) - len(named)
    return (f"; {len(skipped)} of {len(skipped) + placed} cells have no lr optimum: "
            + "; ".join(named) + (f"; and {more} more" if more else "")
            + " (`moetune law fit --help` states what a cell needs)")


def _cell(c: Any, law: LrBatchLaw) -> dict[str, Any]:
    params = c.params if "w" in law.terms else None
    return {"N": c.params, "D": c.tokens, "B": c.batch, "lr": c.lr, "se": c.se,
            "loss": c.loss, "censored": c.censored, "law": law.at(c.tokens, c.batch, params)}


def _exponents(law: LrBatchLaw, tc: TableCells) -> list[dict[str, float]]:
    """The law's local exponents at each fitted batch and budget."""
    batches = sorted({c.batch for c in tc.cells})
    return [{"B": b, "tokens_exponent": law.tokens_exponent(b)} for b in batches]


def write_table_law(data: dict[str, Any], out: Path) -> dict[str, Path]:
    """Write law.json, law.md and law.png into ``out`` (created)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "law.json", "md": out / "law.md", "png": out / "law.png"}
    paths["json"].write_text(json.dumps(data, indent=2, default=float) + "\n")
    paths["md"].write_text(law_table_markdown(data))
    law_table_figure(data, paths["png"])
    return paths


def _g(v: Any, fmt: str = ".3g") -> str:
    return "—" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, fmt)


def law_table_markdown(data: dict[str, Any]) -> str:
    src, law = data["source"], data["lr_batch_law"]
    coef = dict(zip(law["terms"], law["coef"]))
    lines = [
        "# lr law in tokens and batch (fitted from a table of runs)", "",
        f"Source: `{src['path']}`, {src['runs']} runs; columns "
        + ", ".join(f"{k} = `{v}`" for k, v in src["columns"].items())
        + f"; batch × {src['batch_unit']:g} tokens per unit.", "",
        _form_line(law, coef), "",
        *_interaction(law), *_sizes(data, "w" in coef),
        "| term | coefficient |", "|---|---|",
        *[f"| {t} | {_g(c, '.4f')} |" for t, c in coef.items()], "",
        f"Cells fitted: {law['n_cells']} (their lr optimum inside the searched range); "
        f"rms residual {_g(law['resid_sd'])} decades; scatter beyond the cells' own noise "
        f"τ = {_g(law['tau'])} decades (lack of fit p = {_g(law['lack_of_fit_p'])}: "
        "small means the form misses the cells by more than their noise, and τ carries that "
        "into the band).", "",
        f"Fitted range: D {_g(law['tokens_range'][0])}–{_g(law['tokens_range'][1])} tokens, "
        f"B {_g(law['batch_range'][0])}–{_g(law['batch_range'][1])} tokens per step"
        + (f", N {_g(law['params_range'][0])}–{_g(law['params_range'][1])}"
           if law.get("params_range") else "") + ". Every use states its distance past it.", "",
        "## The D-exponent of lr* at each batch", "",
        "| B (tokens/step) | d log lr* / d log D |", "|---|---|",
        *[f"| {_g(e['B'])} | {_g(e['tokens_exponent'], '+.3f')} |" for e in data["exponents"]],
        "", *_batch_optimum(data["batch_optimum"]), *_cells(data)]
    return "\n".join(lines) + "\n"


def _form_line(law: dict[str, Any], coef: dict[str, float]) -> str:
    """The form the fit chose, in words (`LrBatchLaw.describe`); the log-linear one with its
    terms spelled out."""
    fitted = LrBatchLaw.from_dict(law)
    if fitted.shape != "log-linear":
        return f"Modeled: lr*(D, B) {fitted.describe()} (the form the fit chose by AICc)."
    return ("Modeled: lr*(D, B) = 10^(c0 + cD·u + cB·v + cDB·u·v"
            + (" + cN·w" if "w" in coef else "")
            + ("), u, v, w = log10 D, B, N" if "w" in coef else "), u, v = log10 D, B")
            + " minus the fitted cells' mean ("
            + f"{', '.join(_g(10 ** c) for c in law['centre'][:3 if 'w' in coef else 2])}).")


def _interaction(law: dict[str, Any]) -> list[str]:
    """Whether the cells resolve the D x B term: one they cannot tell from zero is left out of
    lr* (law.json lists it so), and its share far out is carried by the band."""
    fitted = LrBatchLaw.from_dict(law)
    here = fitted.interaction(fitted.tokens_range[1], fitted.batch_range[1])
    if here is None:
        return []
    said = (f"The D x B term is {here['coef']:+.3f} ± {here['se']:.3f} (|t| = "
            f"{abs(here['t']):.1f}): ")
    return [said + ("the cells resolve it, and it is in lr*." if not here["left_out"] else
                    "the cells do not tell it from zero, so lr* leaves it out and the band "
                    "carries the law that keeps it (an export's rule says how many decades it "
                    "would give there)."), ""]


def _sizes(data: dict[str, Any], with_n: bool) -> list[str]:
    """At one model size the law has no N term: say so, and that its LR carries to another N
    unmeasured."""
    sizes = sorted({c["N"] for c in data["cells"]})
    if with_n or not sizes:
        return []
    return [f"Fitted at one model size, N = {_g(sizes[0])}: the law has no N term, so how lr* "
            "moves with N was not measured; an export to a model of another size carries it "
            "there unmeasured in N, and its rule says so.", ""]


def _batch_optimum(bo: dict[str, Any]) -> list[str]:
    head = ["## Batch optimum B*(D)", ""]
    if bo["exponent"] is not None:
        head += [f"B*(D) = {_g(bo['coef'])} · D^{_g(bo['exponent'], '.3f')} (modeled, through "
                 "the rows that place an interior optimum).", ""]
    else:
        head += [f"No B*(D) law: {bo['reason']}.", ""]
    head += ["| N | D | B* | why none |", "|---|---|---|---|"]
    return head + [f"| {_g(r['params'])} | {_g(r['tokens'])} | {_g(r['batch'])} | {r['why']} |"
                   for r in bo["rows"]] + [""]


def _cells(data: dict[str, Any]) -> list[str]:
    out = ["## Cells", "", "| N | D | B | lr* (measured, quadratic) | se (decades) | law | "
           "censored |", "|---|---|---|---|---|---|---|"]
    out += [f"| {_g(c['N'])} | {_g(c['D'])} | {_g(c['B'])} | {_g(c['lr'])} | {_g(c['se'])} | "
            f"{_g(c['law'])} | {'yes' if c['censored'] else ''} |" for c in data["cells"]]
    if data["skipped"]:
        out += ["", "Cells without an optimum:", ""]
        out += [f"- N {_g(s['N'])}, D {_g(s['D'])}, B {_g(s['B'])} ({s['runs']} runs): "
                f"{s['why']}" for s in data["skipped"]]
    return out


def law_table_figure(data: dict[str, Any], path: Path) -> Path:
    import matplotlib
    import numpy as np
    from matplotlib.figure import Figure

    law = LrBatchLaw.from_dict(data["lr_batch_law"])
    fig = Figure(figsize=(8, 5))
    ax = fig.add_subplot()
    rows = sorted({(c["N"], c["D"]) for c in data["cells"]})
    cmap = matplotlib.colormaps["viridis"]
    bs = np.geomspace(*law.batch_range, 40)
    for i, (n, d) in enumerate(rows):
        colour = cmap(i / max(1, len(rows) - 1))
        cs = [c for c in data["cells"] if (c["N"], c["D"]) == (n, d) and not c["censored"]]
        ax.errorbar([c["B"] for c in cs], [c["lr"] for c in cs], fmt="o", ms=3,
                    color=colour,
                    yerr=[[c["lr"] * (1 - 10 ** (-2 * c["se"])) for c in cs],
                          [c["lr"] * (10 ** (2 * c["se"]) - 1) for c in cs]])
        p = n if "w" in law.terms else None
        ax.plot(bs, [law.at(d, b, p) for b in bs], color=colour, lw=1,
                label=f"N {n:.3g}, D {d:.3g}")
        band = np.array([law.band(d, b, p) for b in bs])
        ax.fill_between(bs, band[:, 0], band[:, 1], color=colour, alpha=0.08)
    ax.set(xscale="log", yscale="log", xlabel="batch B (tokens per step)", ylabel="lr*",
           title="lr*(D, B): cells (measured optima, ±2 se) and the law (modeled, 95% band)")
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path
