"""`moetune export STUDY` and `moetune validate STUDY`: the way from a study to the full run.

`export` writes the chosen recipe as a full-run launch config; `validate` re-trains the top
recipes on a wider proxy and records whether the ranking survives (transfer confidence).
`register(subparsers)` adds both sub-commands; its handler returns the exit status (0 written,
2 bad input or nothing exportable: nothing written, the reason on stderr). Studies are found as
every other command finds them (`tuner.app.commands`: ``--root`` / ``$MOETUNE_ROOT``, ``--storage``
/ ``$MOETUNE_STORAGE``).

    moetune export my-study --pick knee --target deepseek-v3-671b --hardware h800 \\
        --gpus 2048 --tokens 14.8e12 --format megatron --out run.args
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from tuner.app.commands import open_study, where_options
from tuner.app.requests.actions import ExportRequest, export
from tuner.app.requests.errors import UsageError
from tuner.app.requests.export_options import parse_target
from tuner.app.status import law_budget_rows
from tuner.export import formats
from tuner.export.formats import torchtitan
from tuner.export.pick import PICKS
from tuner.modeling.full_run import (
    DEFAULT_MFU,
    ExportError,
)
from tuner.modeling.hardware import HARDWARE
from tuner.study.specs.spec import SpecError
from tuner.study.store import storage as st


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``export`` sub-command."""
    p = subparsers.add_parser(
        "export", help="scale a study's chosen recipe to the full run and write it as a launch "
        "config",
        description="Scale a study's chosen recipe to the full run and write it as a launch "
        "config. Warmup is kept in optimizer steps (Adam updates), so no batch moves it: the "
        "proxy's tuned warmup steps when they span at least 2/(1-beta2) updates, else "
        "DeepSeek-V3's 2000 steps (docs/full_run.md, the scaling rules' warmup row).")
    p.add_argument("study", help="study name")
    p.add_argument("--pick", nargs="+", default=["knee"], metavar="HOW",
                   help=f"one of {PICKS}; 'trial N' picks trial number N (default: knee, the "
                        "report's recommendation; with one objective the best trial)")
    p.add_argument("--max-memory-gb", type=float, help="only trials whose measured proxy peak "
                   "memory (GiB) is at most this")
    p.add_argument("--min-tokens-per-s", type=float, help="only trials at least this fast")
    p.add_argument("--target", required=True, help="a published config (deepseek-v3-16b, "
                   "deepseek-v3-236b, deepseek-v3-671b), a DeepSeek-style config JSON or a "
                   "proxy preset")
    p.add_argument("--hardware", default="h800", help=f"one of {sorted(HARDWARE)}")
    p.add_argument("--gpus", type=int, required=True,
                   help="GPUs of the full run (its parallel plan and GPU-hours are modeled)")
    p.add_argument("--tokens", type=float, required=True,
                   help="training tokens of the full run (e.g. 14.8e12)")
    p.add_argument("--seq-len", type=int, default=4096,
                   help="the full run's sequence length in tokens (default: %(default)s)")
    p.add_argument("--global-batch", type=int, help="final global batch in sequences "
                   "(default: the anchored answer's: the published recipes' prior, combined with "
                   "a law study's batch law); the LR is the anchored answer at this batch")
    p.add_argument("--lr", type=float, help="the full run's LR (under muP the base LR; hidden "
                   "matrices get lr / width_mult), written instead of any rule's")
    p.add_argument("--lr-at-fitted-batch", action="store_true",
                   help="a law study that never varied the batch: write its LR as measured at "
                        "its own batch, labelled lr.valid_at_batch (otherwise refused)")
    p.add_argument("--lr-wide-band", action="store_true",
                   help="write the anchored LR even where its 95%% band at the full run is wider "
                        "than 4x, labelled with its band (otherwise refused)")
    p.add_argument("--recipes", type=Path, metavar="RECIPES_TOML",
                   help="the team's own past full runs, in the recipe table's form "
                        "(docs/full_run.md): added to the published recipes' prior, read first")
    p.add_argument("--reference", metavar="STUDY",
                   help="a law study of a reference configuration (shaped and set like "
                        "DeepSeek's recipes) run beside this law study on the same data, "
                        "budgets and batches: its measured offset moves the published "
                        "recipes' prior, if it held on the largest budget (docs/full_run.md)")
    p.add_argument("--law", type=Path, metavar="LAW_JSON",
                   help="a law.json of `moetune law fit`: the LR is its lr*(D, B) at the full "
                        "run's tokens and final batch (a study trained without muP)")
    p.add_argument("--micro-batch", type=int, default=1,
                   help="sequences per GPU per forward pass (default: %(default)s)")
    p.add_argument("--tp", type=int, help="fix the tensor-parallel degree")
    p.add_argument("--pp", type=int, help="fix the pipeline-parallel degree")
    p.add_argument("--ep", type=int, help="fix the expert-parallel degree")
    p.add_argument("--memory-fraction", type=float, default=0.9,
                   help="share of GPU memory the modeled peak may use (default: %(default)s)")
    p.add_argument("--mfu", type=float, default=DEFAULT_MFU,
                   help="model FLOPs utilization assumed for GPU-hours (default: %(default)s, "
                        "the value that reproduces DeepSeek-V3's reported GPU-hours)")
    p.add_argument("--format", default="native", help=f"one of {sorted(formats.FORMATS)}")
    p.add_argument("--out", type=Path, help="output file (default: stdout)")
    where_options(p)
    p.set_defaults(handler=run_export)


def check_out(path: Path | None) -> None:
    """``--out`` must name a file that can be written: not a folder, and under a folder
    that exists (or can be made) and is writable. Checked before any work, so a bad path
    costs nothing and writes nothing.

    Raises:
        UsageError: the path cannot be written, with the reason.
    """
    if path is None:
        return
    rule = "a writable file path"
    if path.is_dir():
        raise UsageError(f"--out: must be {rule}, but got --out {str(path)!r}, a folder.")
    if path.exists() and not os.access(path, os.W_OK):
        raise UsageError(f"--out: must be {rule}, but --out {str(path)!r} is read-only.")
    folder = path.parent
    while not folder.exists():  # the folders that --out would create
        folder = folder.parent
    if not folder.is_dir():
        raise UsageError(f"--out: must be {rule}, but got --out {str(path)!r}: {str(folder)!r} "
                         "is not a folder.")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"--out: must be {rule}, but got --out {str(path)!r}: folder "
                         f"{str(folder)!r} is not writable.")


def write_out(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a temporary file, then a rename).

    Raises:
        UsageError: the file system refused (e.g. read-only), nothing left behind.
    """
    tmp = path.with_name(f".{path.name}.moetune-tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text)
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UsageError(f"--out: cannot write --out {str(path)!r}: {exc.strerror or exc}.") \
            from None


def unfinished_hint(study: Any) -> str:
    """`` The law ... is not finished ...`` when ``study`` is a budget of a law that has a budget
    not complete (an export that finds no trial to pick is then usually that), else ''."""
    try:
        rows = law_budget_rows(study)
    except (SpecError, st.IncompleteStudy):
        return ""
    left = [r for r in rows if r["state"] != "complete"]
    if not left:
        return ""
    base = rows[0]["study"]
    return (f" The law {base!r} is not finished (budget {left[0]['budget']} "
            f"{left[0]['state']}): `moetune resume {base}` goes on.")


def run_export(args: argparse.Namespace) -> int:
    study = None
    try:
        request = ExportRequest.from_namespace(args)
        parse_target(args)  # the target read before the study is opened
        check_out(args.out)
        file = args.out.name if args.out is not None else formats.file_name(request.format)
        if request.format in formats.NAMED_BY_FILE and args.out is not None:
            torchtitan.check_module_name(args.out.stem)
        study = open_study(args.study, Path(args.root) / args.study, args.storage)
        done = export(study, request, run_dir=Path(args.root) / args.study,
                      storage=args.storage, file=file, law_file=args.law,
                      recipes=args.recipes)
        if args.out is not None:
            # the launch config last: a file that is there is a whole export's
            for name, text in reversed(done.files.items()):
                write_out(args.out.with_name(name), text)
    except (LookupError, ValueError, ExportError) as exc:
        hint = unfinished_hint(study) if study and "moetune resume" not in str(exc) else ""
        print(f"moetune export: error: {exc}{hint}", file=sys.stderr)
        return 2
    for line in done.messages(request.format):
        print(f"moetune export: {line}", file=sys.stderr)
    if request.format in formats.SIDECARS:
        where = (args.out.with_name(formats.sidecar_name(file, request.format)) if args.out
                 else "written only with --out")
        print(f"moetune export: training-only fields, notes and warnings: {where}",
              file=sys.stderr)
    if args.out is None:
        sys.stdout.write(done.text)
    return 0
