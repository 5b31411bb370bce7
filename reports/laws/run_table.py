"""A table of runs a team already has, read into the cells of a law in tokens and batch.

One row per training run: N non-embedding parameters, D tokens, B batch tokens per step, lr,
final loss. Column names are mapped, not renamed in a copy (``columns={"B": "bs"}``), and a
batch column counted in sequences is scaled by ``batch_unit`` tokens per unit (Step Law's
``bs`` is in sequences of 2,048 tokens: ``batch_unit=2048``). Every other column must describe
the cell, not the run — constant within each (N, D, B) cell (an architecture, a step count) —
or name each run (a distinct text in every row), or be declared in ``vary`` (another loss, a
seed): a column that changes between the runs of one cell and is not declared would be a second
knob moving under the lr bowl, so it is refused.

A loss that is not finite (NaN, inf) marks a diverged run: it is dropped from its cell's bowl,
as a diverged trial is in a study.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tuner.modeling.laws.lr_batch_law import (
    Cell,
    cell_from_optimum,
    cell_optimum,
    censored_bound,
    skew_shift,
)
from tuner.modeling.laws.response_surface import SurfaceError

KEYS = ("N", "D", "B", "lr", "loss")
SUFFIXES = (".csv", ".parquet")


class RunTableError(ValueError):
    """A run table breaks a rule; the message names the column, the rule and the value."""


@dataclass(frozen=True, kw_only=True)
class RunTable:
    """The runs, as canonical columns N, D, B (tokens), lr, loss, and where they came from."""

    path: str
    columns: dict[str, str]  # canonical key -> the table's column
    batch_unit: float
    runs: Any  # pandas DataFrame with columns KEYS

    def describe(self) -> dict[str, Any]:
        return {"path": self.path, "columns": self.columns, "batch_unit": self.batch_unit,
                "runs": len(self.runs)}


def read_runs(path: str | Path, *, columns: Mapping[str, str] | None = None,
              batch_unit: float = 1.0, vary: Sequence[str] = ()) -> RunTable:
    """Read and check the run table at ``path`` (.csv or .parquet; module docstring).

    Raises:
        RunTableError: naming the column (or argument), the rule and the value.
    """
    import pandas as pd

    p = Path(path)
    if p.suffix.lower() not in SUFFIXES:
        raise RunTableError(f"RUNS: must end in .csv or .parquet, but got {str(p)!r}")
    if not p.is_file():
        raise RunTableError(f"RUNS: must be an existing file, but got {str(p)!r}")
    mapping = _mapping(columns or {})
    if not (isinstance(batch_unit, int | float) and math.isfinite(batch_unit) and batch_unit > 0):
        raise RunTableError(f"--batch-unit: must be a positive number of tokens, but got "
                            f"{batch_unit!r}")
    try:
        raw = pd.read_csv(p) if p.suffix.lower() == ".csv" else pd.read_parquet(p)
    except Exception as e:  # noqa: BLE001 - a malformed file is the user's, said plainly
        raise RunTableError(f"RUNS: must be a readable {p.suffix} table, but reading it "
                            f"failed: {e}") from None
    return RunTable(path=str(p), columns=mapping, batch_unit=float(batch_unit),
                    runs=_checked(raw, mapping, float(batch_unit), vary))


def _mapping(columns: Mapping[str, str]) -> dict[str, str]:
    unknown = sorted(set(columns) - set(KEYS))
    if unknown:
        raise RunTableError(f"--column: keys must be among {list(KEYS)}, but got {unknown}")
    return {k: str(columns.get(k, k)) for k in KEYS}


def _checked(raw: Any, mapping: dict[str, str], unit: float, vary: Sequence[str]) -> Any:
    import pandas as pd

    have = [str(c) for c in raw.columns]
    for key, col in mapping.items():
        if col not in have:
            raise RunTableError(f"column {col!r} (for {key}): must be in the table (map another "
                                f"with --column {key}=NAME), but got columns {have}")
    for col in vary:
        if col not in have:
            raise RunTableError(f"--vary: must name columns of the table, but got {col!r} "
                                f"(columns {have})")
    if len(raw) == 0:
        raise RunTableError("RUNS: must hold at least one run, but got an empty table")
    out = pd.DataFrame({k: pd.to_numeric(raw[c], errors="coerce") for k, c in mapping.items()})
    for key in ("N", "D", "B", "lr"):
        bad = out[key][~(np.isfinite(out[key]) & (out[key] > 0))]
        if len(bad):
            row = int(bad.index[0])
            got = _cell(raw[mapping[key]].iloc[row])
            raise RunTableError(f"column {mapping[key]!r} (for {key}): must be a positive finite "
                                f"number in every row, but got {got} in row {row + 2} of the file")
    nonnum = out["loss"].isna() & raw[mapping["loss"]].notna()
    if nonnum.any():
        row = int(np.flatnonzero(nonnum.to_numpy())[0])
        got = _cell(raw[mapping["loss"]].iloc[row])
        raise RunTableError(f"column {mapping['loss']!r} (for loss): must be a number (NaN or "
                            f"inf for a diverged run), but got {got} in row {row + 2} of the file")
    out["B"] = out["B"] * unit
    _check_others(raw, out, set(mapping.values()) | set(vary))
    return out


def _cell(value: Any) -> str:
    """A table's value as the file shows it: ``-0.0037`` or ``'abc'``, not numpy's repr
    (``np.float64(-0.0037)``)."""
    return repr(value.item() if isinstance(value, np.generic) else value)


def _check_others(raw: Any, out: Any, known: set[str]) -> None:
    """Every column not mapped or declared is constant within each cell or names each run."""
    from pandas.api.types import is_numeric_dtype

    cell = [out["N"], out["D"], out["B"]]
    bad = []  # (column, its values per cell): every one is named, not one per attempt
    for col in raw.columns:
        if str(col) in known:
            continue
        series = raw[col]
        if not is_numeric_dtype(series) and series.nunique(dropna=False) == len(series):
            continue  # a distinct text in every row: a run's name
        per_cell = series.groupby(cell).nunique(dropna=False)
        if (per_cell > 1).any():
            bad.append((str(col), per_cell))
    if not bad:
        return
    col, per_cell = bad[0]
    where = per_cell[per_cell > 1].index[0]
    more = [c for c, _ in bad[1:]]
    raise RunTableError(
        f"column {col!r}: must be constant within each (N, D, B) cell, name each run, or be "
        f"declared with --vary {col!r}, but it takes {int(per_cell.max())} values within the "
        f"cell N={where[0]:.4g}, D={where[1]:.4g}, B={where[2]:.4g}"
        + (f"; so do {len(more)} more: {', '.join(repr(c) for c in more)} (declare each that "
           "is a result of the run with --vary; one that is a setting, such as a model's "
           "shape, means N, D and B do not tell its runs apart)" if more else ""))


@dataclass(frozen=True, kw_only=True)
class TableCells:
    cells: tuple[Cell, ...]
    skipped: tuple[dict[str, Any], ...]  # N, D, B, runs, why (no optimum placed)


def table_cells(table: RunTable, *, seed: int = 0) -> TableCells:
    """Each (N, D, B) cell's lr optimum (`tuner.modeling.laws.lr_batch_law.cell_optimum`)."""
    cells, skipped = [], []
    for (n, d, b), g in table.runs.groupby(["N", "D", "B"], sort=True):
        try:
            opt, censored = cell_optimum(g["lr"].to_numpy(), g["loss"].to_numpy(), seed=seed)
        except SurfaceError as e:
            skipped.append({"N": float(n), "D": float(d), "B": float(b), "runs": len(g),
                            "why": str(e)})
            continue
        lrs, losses = g["lr"].to_numpy(), g["loss"].to_numpy()
        cells.append(cell_from_optimum(opt, tokens=float(d), batch=float(b),
                                       params=float(n), censored=censored,
                                       skew=skew_shift(lrs, losses),
                                       bound=censored_bound(lrs, losses)))
    return TableCells(cells=tuple(cells), skipped=tuple(skipped))
