"""reports.build: one study → trials.csv/.parquet, ranked.md, report.html and PNGs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import optuna
import pandas as pd

from reports.analysis.importance import param_importances
from reports.analysis.progress import progress
from reports.analysis.snapshot import Snapshot, take_snapshot
from reports.html import render_html
from reports.png import write_pngs
from reports.ranked import render_ranked
from reports.sections.fp8_gap import fp8_gaps


def build(study: optuna.Study, out_dir: str | Path, *, snapshot_note: str | None = None,
          reference_point: Sequence[float] | None = None) -> dict[str, Path]:
    """Write the report files of `study` into `out_dir` (created if needed).

    Every file is built from one read of the storage, so they agree with each other even while
    the study runs; a running study's report says it is a snapshot.

    Args:
        study: a moetune study (see ``tuner.study.store.records`` for what it keeps); plain Optuna
            studies work too, with fewer columns filled.
        out_dir: folder for the files.
        snapshot_note: extra sentence for the snapshot banner (e.g. "written by submit after
            trial 40"); giving one marks the report as a snapshot.
        reference_point: hypervolume reference point, one value per objective in the
            objectives' own orientation; derived from the data when omitted.

    Returns:
        ``{"trials_csv", "trials_parquet", "ranked_md", "report_html", "<name>_png", ...}`` → path.

    Example:
        >>> paths = reports.build(optuna.load_study(study_name="s1", storage=url), "out/s1")
        >>> paths["report_html"]
        PosixPath('out/s1/report.html')
    """
    snap = take_snapshot(study, note=snapshot_note)
    return write_report(snap, out_dir, reference_point=reference_point)


def write_report(snap: Snapshot, out_dir: str | Path, *,
                 reference_point: Sequence[float] | None = None) -> dict[str, Path]:
    """`build` for a snapshot already taken (so a caller can print from the same read).

    Raises:
        ValueError: `reference_point` has the wrong length (nothing is written then).
    """
    prog = progress(snap, reference=reference_point)  # validates before anything is written
    imp = param_importances(snap)
    gaps = fp8_gaps(snap)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"trials_csv": out / "trials.csv", "trials_parquet": out / "trials.parquet",
             "ranked_md": out / "ranked.md", "report_html": out / "report.html"}
    csv_safe(snap.frame).to_csv(paths["trials_csv"], index=False)
    snap.frame.to_parquet(paths["trials_parquet"], index=False)
    paths["ranked_md"].write_text(render_ranked(snap, importances=imp, gaps=gaps, prog=prog),
                                  encoding="utf-8")
    paths["report_html"].write_text(render_html(snap, importances=imp, gaps=gaps, prog=prog),
                                    encoding="utf-8")
    paths.update(write_pngs(snap, out, importances=imp, prog=prog))
    return paths


# A spreadsheet runs a cell that starts with one of these as a formula (OWASP, "CSV Injection":
# https://owasp.org/www-community/attacks/CSV_Injection).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every string cell that a spreadsheet would run as a formula prefixed with
    a quote (``'=1+1``), as OWASP advises; numbers, and strings that read as numbers, stay."""
    def cell(v: object) -> object:
        if isinstance(v, str) and v.startswith(FORMULA_STARTS) and not _is_number(v):
            return "'" + v
        return v

    out = frame.copy()
    for col in out.columns:
        if not pd.api.types.is_numeric_dtype(out[col]):  # object and str columns
            out[col] = out[col].map(cell)
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
