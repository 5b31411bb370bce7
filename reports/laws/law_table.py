"""``moetune law fit``'s report: the law in tokens and batch from a table of runs, as law.md,
law.json and law.png.

The fit is `tuner.modeling.laws.forms.fit_lr_law` on the table's cells (`reports.laws.run_table`):
each (N, D, B) cell's lr optimum, the registered form of lr* that fits them best (lr*(D, B)
[× N^cN with several model sizes], `tuner.modeling.laws.lr_batch_law`, among them) with its
band, and the batch optimum B*(D) where the grid places it. law.json carries the law as
``lr_batch_law`` (its ``to_dict``, read back by `tuner.modeling.laws.forms.read_lr_law`); the
form's own lines in law.md come from the law (`tuner.modeling.laws.interface.LrForm`). The
figure: lr* against B, one colour per (N, D) row, the cells' optima with their ±2 se, the law's
line and band across the fitted batches.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reports.laws.run_table import RunTable, table_cells
from tuner.modeling.laws.forms import fit_lr_law, read_lr_law
from tuner.modeling.laws.interface import LrForm
from tuner.modeling.laws.lr_batch_law import Cell, LawFitError, fit_batch_optimum

MAX_NAMED = 4  # skipped cells a failed fit's error names one by one (the rest counted)


def table_law_data(table: RunTable, *, seed: int = 0) -> dict[str, Any]:
    """Everything law.md says, as numbers.

    Raises:
        LawFitError: no law can be fitted; it names the cells left without an optimum and
            why, since those are what a user must fix (a sweep too short to fit a bowl).
    """
    tc = table_cells(table, seed=seed)
    try:
        law = fit_lr_law(tc.cells)
    except LawFitError as e:
        raise LawFitError(f"{e}{skipped_words(tc.skipped, len(tc.cells))}") from None
    return cells_law_data(law, tc.cells, source=table.describe(), skipped=tc.skipped)


def cells_law_data(law: LrForm, cells: Sequence[Cell], *, source: dict[str, Any],
                   skipped: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """law.md's numbers for ``law`` fitted through ``cells`` of the table ``source``
    describes (``skipped``: its cells without an optimum)."""
    return {"source": source, "lr_batch_law": law.to_dict(),
            "cells": [_cell(c, law) for c in cells], "skipped": list(skipped),
            "batch_optimum": fit_batch_optimum(cells).to_dict(),
            "exponents": _exponents(law, cells)}


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


def _cell(c: Cell, law: LrForm) -> dict[str, Any]:
    params = c.params if law.params_range else None
    return {"N": c.params, "D": c.tokens, "B": c.batch, "lr": c.lr, "se": c.se,
            "loss": c.loss, "censored": c.censored, "law": law.at(c.tokens, c.batch, params)}


def _exponents(law: LrForm, cells: Sequence[Cell]) -> list[dict[str, float]]:
    """The law's local D-exponent at each fitted batch."""
    batches = sorted({c.batch for c in cells})
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
    src, law = data["source"], read_lr_law(data["lr_batch_law"])
    (d0, d1), (b0, b1) = law.tokens_range, law.batch_range
    lines = [
        "# lr law in tokens and batch (fitted from a table of runs)", "",
        f"Source: `{src['path']}`, {src['runs']} runs; columns "
        + ", ".join(f"{k} = `{v}`" for k, v in src["columns"].items())
        + f"; batch × {src['batch_unit']:g} tokens per unit.", "",
        law.formula(), "",
        *_interaction(law), *_sizes(data, law.params_range is not None),
        *law.coefficient_lines(),
        f"Fitted range: D {_g(d0)}–{_g(d1)} tokens, B {_g(b0)}–{_g(b1)} tokens per step"
        + (f", N {_g(law.params_range[0])}–{_g(law.params_range[1])}"
           if law.params_range else "") + ". Every use states its distance past it.", "",
        "## The D-exponent of lr* at each batch", "",
        "| B (tokens/step) | d log lr* / d log D |", "|---|---|",
        *[f"| {_g(e['B'])} | {_g(e['tokens_exponent'], '+.3f')} |" for e in data["exponents"]],
        "", *_batch_optimum(data["batch_optimum"]), *_cells(data)]
    return "\n".join(lines) + "\n"


def _interaction(law: LrForm) -> list[str]:
    """Whether the cells resolve the D x B term: one they cannot tell from zero is left out of
    lr* (law.json lists it so), and its share far out is carried by the band; nothing for a
    form without one."""
    here = law.interaction(law.tokens_range[1], law.batch_range[1])
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

    law = read_lr_law(data["lr_batch_law"])
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
        p = n if law.params_range else None
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
