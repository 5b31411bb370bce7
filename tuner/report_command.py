"""`moetune report` and `moetune compare`: turn studies in storage into report files.

`register(subparsers)` adds both sub-commands to the `moetune` parser; each handler returns the
exit status (0 done, 2 bad input: nothing written).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import optuna

import reports
from tuner import storage as study_storage

DEFAULT_ROOT = Path("runs")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``report`` and ``compare`` sub-commands."""
    p = subparsers.add_parser("report", help="write ranked.md, report.html, PNGs and "
                              "trials.csv/.parquet for a study")
    p.add_argument("study", help="study name")
    p.add_argument("--out", type=Path, help="output folder (default: ROOT/STUDY/report)")
    _storage_args(p)
    p.set_defaults(handler=run_report)
    c = subparsers.add_parser("compare", help="two studies' Pareto fronts and hypervolumes "
                              "under one reference point")
    c.add_argument("study_a")
    c.add_argument("study_b")
    c.add_argument("--out", type=Path, help="output folder (default: ROOT/compare-A-B)")
    _storage_args(c)
    c.set_defaults(handler=run_compare)


def _storage_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", type=Path, default=DEFAULT_ROOT,
                   help="folder holding one run folder per study (default: %(default)s)")
    p.add_argument("--storage", default="", help="Optuna storage URL (default: the sqlite "
                   "file in the study's run folder)")
    p.add_argument("--reference-point", type=float, nargs="+", metavar="V",
                   help="hypervolume reference point, one value per objective")


def open_study(name: str, root: Path, storage_override: str) -> optuna.Study:
    """Load study `name` from ``--storage`` or from its run folder under ``--root``.

    Raises:
        LookupError: no such study (the message lists the known ones).
    """
    url = study_storage.storage_url(root / name, storage_override)
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        raise LookupError(f"study {name!r}: no storage at {url} (set --root or --storage).")
    return study_storage.load_study(name, study_storage.open_storage(url))


def run_report(args: argparse.Namespace) -> int:
    try:
        study = open_study(args.study, args.root, args.storage)
        out = args.out or args.root / args.study / "report"
        snap = reports.take_snapshot(study)
        paths = reports.write_report(snap, out, reference_point=args.reference_point)
    except (LookupError, ValueError) as exc:
        print(f"moetune report: {exc}", file=sys.stderr)
        return 2
    print(f"report for {args.study!r} in {out}:")
    if snap.banner():
        print(snap.banner())
    print(reports.top_table(snap.frame, 5))
    for path in paths.values():
        print(f"  {path}")
    return 0


def run_compare(args: argparse.Namespace) -> int:
    try:
        studies = [open_study(n, args.root, args.storage) for n in (args.study_a, args.study_b)]
        out = args.out or args.root / f"compare-{args.study_a}-{args.study_b}"
        paths = reports.compare(*studies, out, reference_point=args.reference_point)
    except (LookupError, ValueError) as exc:
        print(f"moetune compare: {exc}", file=sys.stderr)
        return 2
    print(paths["compare_md"].read_text(encoding="utf-8"))
    return 0
