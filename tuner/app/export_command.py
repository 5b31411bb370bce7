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
import json
import os
import sys
from pathlib import Path
from typing import Any

from trainers.validation import FieldError, relabel
from tuner.app.commands import open_study, where_options
from tuner.app.errors import UsageError
from tuner.export import formats
from tuner.export.export import export_study
from tuner.export.formats import torchtitan
from tuner.export.pick import PICKS, Pick
from tuner.modeling.full_run import (
    DEFAULT_MFU,
    ExportError,
    FullRunLimits,
    FullRunTarget,
    load_target,
)
from tuner.modeling.hardware import HARDWARE, get_hardware


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``export`` sub-command."""
    p = subparsers.add_parser("export", help="scale a study's chosen recipe to the full run and "
                              "write it as a launch config")
    p.add_argument("study", help="study name")
    p.add_argument("--pick", nargs="+", default=["best-loss"], metavar="HOW",
                   help=f"one of {PICKS}; 'trial N' picks trial number N (default: best-loss)")
    p.add_argument("--max-memory-gb", type=float, help="only trials whose measured proxy peak "
                   "memory (GiB) is at most this")
    p.add_argument("--min-tokens-per-s", type=float, help="only trials at least this fast")
    p.add_argument("--target", required=True, help="a published config (deepseek-v3-16b, "
                   "deepseek-v3-236b, deepseek-v3-671b), a DeepSeek-style config JSON or a "
                   "proxy preset")
    p.add_argument("--hardware", default="h800", help=f"one of {sorted(HARDWARE)}")
    p.add_argument("--gpus", type=int, required=True)
    p.add_argument("--tokens", type=float, required=True,
                   help="training tokens of the full run (e.g. 14.8e12)")
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--global-batch", type=int, help="final global batch in sequences "
                   "(default: B_opt of the compute law)")
    p.add_argument("--micro-batch", type=int, default=1)
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


def parse_pick(args: argparse.Namespace) -> Pick:
    """``--pick knee`` / ``--pick trial 7`` plus the limits, validated."""
    words = args.pick
    trial = None
    if words[0] == "trial":
        if len(words) != 2 or not words[1].isdigit():
            raise ValueError(f"--pick: 'trial' takes one trial number, but got "
                             f"--pick {' '.join(words)!r}.")
        trial = int(words[1])
    elif len(words) != 1:
        raise ValueError(f"--pick: must be one of {PICKS} (trial N), but got "
                         f"--pick {' '.join(words)!r}.")
    return Pick(kind=words[0], trial=trial, max_memory_gb=args.max_memory_gb,
                min_tokens_per_s=args.min_tokens_per_s)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


class FlagError(UsageError, FieldError):
    """A command-line option breaks a rule; ``field`` is the flag (``--gpus``)."""


def _as_flag(e: FieldError) -> FieldError:
    """``e``, of a full run's field (`FullRunLimits`, the target), said of its flag."""
    flag = _flag(e.field)
    return relabel(e, flag, error=FlagError, shown=lambda v: f"{flag} {v!r}")


def check_numbers(args: argparse.Namespace) -> None:
    """Range checks of the numeric options: the full run's are `FullRunLimits`' (a spec's
    ``[full_run]`` has the same), the pick's below; the error names the option, the rule and
    the value.

    Raises:
        UsageError: the first option out of range (a `FlagError`: ``field`` is the flag).
    """
    def bad(name: str, rule: str) -> UsageError:
        return UsageError(f"{_flag(name)}: must be {rule}, but got {_flag(name)} "
                          f"{getattr(args, name)!r}.")

    try:  # None: chosen by a rule
        FullRunLimits(gpus=args.gpus, tokens=args.tokens, seq_len=args.seq_len,
                      global_batch=args.global_batch, micro_batch=args.micro_batch,
                      memory_fraction=args.memory_fraction, mfu=args.mfu, tp=args.tp,
                      pp=args.pp, ep=args.ep)
    except FieldError as e:
        raise _as_flag(e) from None
    if args.max_memory_gb is not None and not args.max_memory_gb > 0:
        raise bad("max_memory_gb", "positive")
    if args.min_tokens_per_s is not None and not args.min_tokens_per_s >= 0:
        raise bad("min_tokens_per_s", "at least 0")


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


def sidecar_path(out: Path) -> Path:
    """Where a model-config format's sidecar goes: ``run.json`` → ``run.moetune.json``."""
    return out.with_name(f"{out.stem}.moetune.json")


def parse_target(args: argparse.Namespace) -> FullRunTarget:
    check_numbers(args)
    tokens = args.tokens
    try:
        model_args, name = load_target(args.target)
    except FieldError as e:
        raise _as_flag(e) from None
    return FullRunTarget(model_args=model_args, name=name, hardware=get_hardware(args.hardware),
                         gpus=args.gpus, tokens=int(tokens), seq_len=args.seq_len,
                         global_batch=args.global_batch, micro_batch=args.micro_batch,
                         memory_fraction=args.memory_fraction, mfu=args.mfu, tp=args.tp,
                         pp=args.pp, ep=args.ep)


def run_export(args: argparse.Namespace) -> int:
    try:
        if args.format not in formats.FORMATS:
            raise ValueError(f"--format: unknown name {args.format!r}; valid formats are "
                             f"{sorted(formats.FORMATS)}.")
        pick = parse_pick(args)
        target = parse_target(args)  # validates before the study is opened
        check_out(args.out)
        stem = args.out.stem if args.out is not None else None
        if args.format in formats.NAMED_BY_FILE and stem is not None:
            torchtitan.check_module_name(stem)
        study = open_study(args.study, Path(args.root) / args.study, args.storage)
        study, measured_at = _ladder_answer(study, Path(args.root) / args.study, args.storage)
        study, law, law_said = _law_answer(study, Path(args.root) / args.study, args.storage)
        measured_at = measured_at or law_said
        full, picked = export_study(study, pick, target, law=law)
        text = formats.render(args.format, full, stem=stem)
        side = formats.SIDECARS.get(args.format)
        if args.out is not None:
            if side is not None:
                write_out(sidecar_path(args.out), json.dumps(side(full), indent=2) + "\n")
            write_out(args.out, text)
    except (LookupError, ValueError, ExportError) as exc:
        print(f"moetune export: {exc}", file=sys.stderr)
        return 2
    for w in full.warnings:
        print(f"moetune export: warning: {w}", file=sys.stderr)
    for n in formats.NOTES[args.format](full):
        print(f"moetune export: note: {n}", file=sys.stderr)
    if side is not None:
        where = sidecar_path(args.out) if args.out else "written only with --out"
        print(f"moetune export: training-only fields, notes and warnings: {where}",
              file=sys.stderr)
    if measured_at:
        print(f"moetune export: {measured_at}", file=sys.stderr)
    print(f"moetune export: trial {picked.record.number}: {picked.how}; "
          f"{full.plan}; checkpoint_ratio {full.recipe.checkpoint_ratio:.3g}; "
          f"{full.cost['gpu_hours']:.4g} GPU-hours (modeled)", file=sys.stderr)
    if full.recipe.precision == "fp8":
        speed = full.cost["precision_speed"]
        print(f"moetune export: {speed['source']}: block matmuls "
              f"{speed['train_speedup']:.3g}x bf16 (modeled)", file=sys.stderr)
    if args.out is None:
        sys.stdout.write(text)
    return 0


def _law_answer(study: Any, run_dir: Path, storage: str) -> tuple[Any, Any, str]:
    """A law study (any of its budgets) exports its laws: the LR and final batch from the
    study's own fit at the full run, the other knobs from the pick at its largest budget (the
    held-out one once it exists), from the same storage."""
    from tuner.study.specs.law_spec import base_name
    from tuner.study.store import database as db
    from tuner.study.store import records
    from tuner.study.store import storage as st
    from tuner.study.workflows.law_fit import budget_studies, fit_law

    if not (study.user_attrs.get(records.SPEC) or {}).get("law"):
        return study, None, ""  # not a law study
    spec = st.stored_spec(study)
    store = db.open_existing_storage(db.storage_url(run_dir, storage, spec.study.storage))
    base = st.stored_spec(st.load_study(base_name(spec.name, spec.law), store))
    studies = budget_studies(base, store)
    fit = fit_law(base, studies)
    law = fit.study_law()
    if law is None:
        raise LookupError(f"law {base.name!r} has no lr law yet (it needs 2 budgets with an "
                          f"optimum): `moetune resume {base.name}` goes on.")
    largest = studies[-1][1]
    held = fit.held_out_check()
    said = (f"law {base.name}: LR and final batch from the study's own laws over "
            f"{len(fit.fitted)} budgets; other knobs from {largest.study_name}"
            + (f"; held-out check: predicted/measured lr {held['lr_ratio']:.2f}"
               if held else "; no held-out check yet"))
    return largest, law, said


def _ladder_answer(study: Any, run_dir: Path, storage: str) -> tuple[Any, str]:
    """A ladder's answer is its top rung: exporting the ladder (its bottom study) exports the
    top rung's trial, from the same storage; a rung says the width it was measured at."""
    from tuner.study.specs.ladder_spec import rung_name
    from tuner.study.store import database as db
    from tuner.study.store import records
    from tuner.study.store import storage as st

    if not (study.user_attrs.get(records.SPEC) or {}).get("ladder"):
        return study, ""  # not a ladder (a study without a stored spec is none either)
    spec = st.stored_spec(study)
    lad = spec.ladder
    if lad.rung == 0:
        top = rung_name(spec.name, lad.widths, len(lad.widths) - 1)
        store = db.open_existing_storage(db.storage_url(run_dir, storage, spec.study.storage))
        if top not in db.study_names(store):
            raise LookupError(f"ladder {spec.name!r} has not reached its top rung ({top}, width "
                              f"{lad.widths[-1]}) yet: `moetune resume {spec.name}` goes on, "
                              f"or export a rung by its name.")
        return (st.load_study(top, store),
                f"ladder {spec.name}: the answer is its top rung {top}, measured at width "
                f"{lad.widths[-1]} (rungs {list(lad.widths)})")
    return study, (f"{spec.name} is rung {lad.rung} of ladder {spec.name.rsplit('.w', 1)[0]}: "
                   f"measured at width {lad.width} (rungs {list(lad.widths)})")
