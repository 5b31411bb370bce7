"""`moetune report` and `moetune compare`: turn studies in storage into report files.

`register(subparsers)` adds both sub-commands to the `moetune` parser; each handler returns the
exit status (0 done, 2 bad input: nothing written). Studies are found as every other command
finds them (`tuner.app.commands`: ``--root`` / ``$MOETUNE_ROOT``, ``--storage`` /
``$MOETUNE_STORAGE``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from tuner.app.commands import open_study, where_options
from tuner.app.requests.errors import UsageError
from tuner.study.store import database as db
from tuner.study.store import records
from tuner.study.store.storage import stored_spec


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
    c.add_argument("study_a", help="the first study's name")
    c.add_argument("study_b", help="the second study's name")
    c.add_argument("--out", type=Path, help="output folder (default: ROOT/compare-A-B)")
    _storage_args(c)
    c.set_defaults(handler=run_compare)


def _storage_args(p: argparse.ArgumentParser) -> None:
    where_options(p)
    p.add_argument("--reference-point", type=float, nargs="+", metavar="V",
                   help="hypervolume reference point, one value per objective")


def check_args(args: argparse.Namespace) -> None:
    """Reject a non-finite reference point and an --out that cannot be a folder, before
    anything is read or written.

    Raises:
        UsageError: naming the option, the rule and the value.
    """
    ref = args.reference_point
    if ref is not None and not all(math.isfinite(v) for v in ref):
        raise UsageError(f"--reference-point: every value must be a finite number, but got "
                         f"{' '.join(str(v) for v in ref)}.")
    if args.out is not None:
        # The first existing folder on the path must be a folder: mkdir fails on a file there.
        for p in (args.out, *args.out.parents):
            if p.exists() and not p.is_dir():
                raise UsageError(f"--out: must be a folder (new or existing), but {str(p)!r} "
                                 f"is a file (got --out {str(args.out)!r}).")
            if p.exists():
                break


def run_report(args: argparse.Namespace) -> int:
    import reports

    try:
        check_args(args)
        study = open_study(args.study, Path(args.root) / args.study, args.storage)
        out = args.out or Path(args.root) / args.study / "report"
        snap = reports.take_snapshot(study)
        paths = reports.write_report(snap, out, reference_point=args.reference_point)
    except (UsageError, ValueError) as exc:
        print(f"moetune report: error: {exc}", file=sys.stderr)
        return 2
    print(f"report for {args.study!r} in {out}:")
    if snap.banner():
        print(snap.banner())
    print(reports.top_table(snap.frame, 5))
    for path in paths.values():
        print(f"  {path}")
    # Without --out, a law's and a ladder's reports sit beside the study's own (ROOT/STUDY/law);
    # with one, inside it: a sibling of a folder the user named could be another study's.
    side = out if args.out is not None else out.parent
    _ladder_report(study, args, side / "ladder")
    _law_report(study, args, out, side / "law")
    return 0


def _law_report(study: Any, args: argparse.Namespace, out: Path, law_out: Path) -> None:
    """For a law study (its budget 0), the law's report in ``law_out``; the budget's own, in
    ``out``, says the answer is the law's."""

    if not (study.user_attrs.get(records.SPEC) or {}).get("law"):
        return  # not a law study
    spec = stored_spec(study)
    if spec.law.budget != 0:
        return
    from reports.laws.law import answer_line, write_law_report

    url = db.storage_url(Path(args.root) / args.study, args.storage, spec.study.storage)
    paths = write_law_report(spec, url=url, out=law_out, budget_report=out)
    for path in paths.values():
        print(f"  {path}")
    print(answer_line(json.loads(paths["json"].read_text())))


def _ladder_report(study: Any, args: argparse.Namespace, out: Path) -> None:
    """For a ladder (its bottom study), the transfer report in ``out``."""

    if not (study.user_attrs.get(records.SPEC) or {}).get("ladder"):
        return  # not a ladder (a study without a stored spec is none either)
    spec = stored_spec(study)
    if spec.kind != "ladder":
        return
    from reports.laws.ladder import write_ladder_report

    url = db.storage_url(Path(args.root) / args.study, args.storage, spec.study.storage)
    for path in write_ladder_report(spec, url=url, out=out).values():
        print(f"  {path}")


def run_compare(args: argparse.Namespace) -> int:
    import reports

    try:
        check_args(args)
        study_a, study_b = (open_study(n, Path(args.root) / n, args.storage)
                            for n in (args.study_a, args.study_b))
        out = args.out or Path(args.root) / f"compare-{args.study_a}-{args.study_b}"
        paths = reports.compare(study_a, study_b, out, reference_point=args.reference_point)
    except (UsageError, ValueError) as exc:
        print(f"moetune compare: error: {exc}", file=sys.stderr)
        return 2
    print(paths["compare_md"].read_text(encoding="utf-8"))
    print(f"compare: wrote {', '.join(str(p) for p in paths.values())}")
    return 0
