"""``moetune validate``: re-train a study's top recipes on a wider proxy and record whether their
ranking survives (transfer confidence), then refresh the study's report to show it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from tuner.app.commands import import_trainer, open_study, where_options
from tuner.study.trial.progress import Log, stderr_lines
from tuner.study.workflows.validate import validate_study


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``validate`` sub-command."""
    v = subparsers.add_parser("validate", help="re-train the top recipes on a wider proxy and "
                              "record whether their ranking survives (transfer confidence)")
    v.add_argument("study", help="study name")
    v.add_argument("--top", type=int, default=5,
                   help="how many of the best feasible trials, at least 2 (default: %(default)s)")
    v.add_argument("--scale", type=float, default=2.0,
                   help="width multiplier of the larger proxy (default: %(default)s)")
    v.add_argument("--token-scale", type=float, default=1.0,
                   help="multiplier of the per-trial token budget (default: %(default)s)")
    v.add_argument("--trainer", default="trainers:train",
                   help="MODULE:FUNCTION with trainers.train's signature (default: %(default)s)")
    v.add_argument("--device", default=None, help="cpu or cuda (default: trainers' choice)")
    where_options(v)
    v.set_defaults(handler=run_validate)


def run_validate(args: argparse.Namespace) -> int:

    try:
        trainer = import_trainer(args.trainer)
        study = open_study(args.study, Path(args.root) / args.study, args.storage)
        out = validate_study(study, top=args.top, scale=args.scale,
                             token_scale=args.token_scale, trainer=trainer, device=args.device)
    except (LookupError, ValueError) as exc:
        print(f"moetune validate: error: {exc}", file=sys.stderr)
        return 2
    # the same folder `moetune report` writes by default, so its transfer section updates
    refresh_report(study, Path(args.root) / args.study / "report", stderr_lines("validate"))
    for row in out["rows"]:
        print(f"trial {row['trial']:>4}: val_loss {row['proxy_val_loss']:.4f} -> "
              f"{float(row['scaled_val_loss']):.4f} at {args.scale:g}x width (lr {row['lr']:.3g})")
    stays = "stays on top" if out["chosen_stays_on_top"] else \
        f"does not stay on top (trial {out['best_at_scale']} is best at scale)"
    print(f"Spearman rank correlation {out['spearman']:.3f} over {len(out['rows'])} recipes "
          f"(measured); chosen trial {out['chosen_trial']} {stays}. Recorded in the study.")
    if len(out["rows"]) < 4:
        # n=2 gives only ±1, n=3 only ±1 and ±0.5: a sign, not a strength
        print(f"note: over {len(out['rows'])} recipes the rank correlation can take only a few "
              "values; --top 5 or more gives a figure worth comparing.")
    return 0


def refresh_report(study: Any, report_dir: Path | None, say: Log) -> None:
    """Rebuild the report so it stops saying "Not checked yet"; the record is already stored,
    so a report that fails to build only needs ``moetune report`` again."""
    rerun = (f"run `moetune report {study.study_name}` (same --root/--storage) to show it in "
             "the report")
    if report_dir is None:
        say(f"validation recorded in the study; the report was not refreshed: {rerun}.")
        return
    import reports

    try:
        reports.build(study, report_dir)
    except Exception as e:  # noqa: BLE001 - the validation itself is safe in storage
        say(f"warning: the report could not be refreshed ({type(e).__name__}: {e}); {rerun}.")
        return
    say(f"report refreshed with the validation: {report_dir}")
