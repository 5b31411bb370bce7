"""The study commands of ``moetune``: submit, resume, status, list, rerun.

Every command finds a study by name under the runs root (``--root``, ``$MOETUNE_ROOT``, default
``./runs``), or in a shared database given by ``--storage`` / ``$MOETUNE_STORAGE``. Input is
validated before anything is written.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tuner.app.requests.actions import ResumeRequest
from tuner.app.requests.errors import DeferredStop, UsageError
from tuner.app.requests.submit import SubmitRequest, submitted_spec
from tuner.app.status import (
    all_failed,
    format_table,
    law_budget_rows,
    study_summary_rows,
    trial_rows,
)
from tuner.study.run import resume as rs
from tuner.study.run.preflight import load_warnings, prepare, prepare_stored
from tuner.study.specs.ladder_spec import RUNG_SEP, rung_name
from tuner.study.specs.law_spec import BUDGET_SEP
from tuner.study.specs.spec import SpecError, StudySpec, check_inputs
from tuner.study.store import database as db
from tuner.study.store import lease as ls
from tuner.study.store import storage as st
from tuner.study.store.control import clear_stop
from tuner.study.trial.progress import stderr_lines
from tuner.study.trial.samplers import SAMPLER_NOTES, resolve_sampler_name
from tuner.study.workflows.stage_runner import first_stage, run_stages

DEFAULT_ROOT = "runs"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("submit", help="run a tuning study from a spec file")
    p.add_argument("spec", help="study spec TOML (e.g. search_spaces/quickstart.toml)")
    p.add_argument("--name", help="study name (overrides [study] name)")
    p.add_argument("--resume", action="store_true",
                   help="continue the study if it exists; the spec may differ from the stored "
                        "one only in n_trials (upwards), max_concurrent and [resources]")
    _run_options(p)
    p.set_defaults(handler=submit)

    p = subparsers.add_parser(
        "resume", help="finish an interrupted study",
        description="Finish a study from its storage, with the spec stored in it: finished "
        "trials are kept, trials left running by a killed or stopped driver are marked "
        "interrupted and run again with the same parameters, the study goes on to n_trials "
        "and its noise re-trainings, then writes its report; a law or a ladder goes on from "
        "its first unfinished budget or rung.")
    p.add_argument("study", help="study name (as `moetune list` shows it)")
    _run_options(p)
    p.set_defaults(handler=resume)

    p = subparsers.add_parser("status", help="trials of a study, or a summary of all studies")
    p.add_argument("study", nargs="?", help="study name: its trials, best first (a law: its "
                   "budgets); none: one row per study")
    where_options(p)
    p.set_defaults(handler=status)

    p = subparsers.add_parser("list", help="studies under the root (or in --storage)")
    where_options(p)
    p.set_defaults(handler=list_studies)

    p = subparsers.add_parser("rerun", help="re-run one trial outside the service")
    p.add_argument("study", help="study name (as `moetune list` shows it)")
    p.add_argument("trial", type=int, help="trial number")
    p.add_argument("--device", default=None, help="cpu or cuda (default: the stored device)")
    where_options(p)
    p.set_defaults(handler=rerun)


def where_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", default=os.environ.get("MOETUNE_ROOT", DEFAULT_ROOT),
                   help="folder holding the run folders (default: $MOETUNE_ROOT or ./runs)")
    p.add_argument("--storage", default=os.environ.get("MOETUNE_STORAGE", ""),
                   help="database URL, e.g. postgresql://user:pw@host/db (default: the "
                        "study's sqlite file)")


def _run_options(p: argparse.ArgumentParser) -> None:
    where_options(p)
    p.add_argument("--address", default=None,
                   help="Ray cluster to join (e.g. 10.0.0.1:6379 or auto); default: local Ray")
    p.add_argument("--trainer", default="trainers:train",
                   help="MODULE:FUNCTION with trainers.train's signature (default: %(default)s)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


# -- submit / resume -------------------------------------------------------------------------


def submit(args: argparse.Namespace) -> int:
    request = SubmitRequest.from_namespace(args)
    check_root(args.root)
    spec = submitted_spec(request)  # the one parse
    try:
        check_inputs(spec)  # and the one input check, here, where the study runs
    except SpecError as e:
        raise UsageError(str(e)) from None
    for warning in load_warnings(spec):
        print(f"moetune: warning: {warning}", file=sys.stderr)
    trainer = import_trainer(args.trainer)
    run_dir = Path(args.root) / spec.name
    if not request.resume and run_dir.exists():
        raise UsageError(f"study {spec.name!r} already exists ({run_dir}); pass --resume to "
                         f"continue it, or choose another name with --name.")
    # the one preflight, for every kind: a law's or ladder's first stage is checked here (exists,
    # resume rules, lease) and each stage then runs through its own
    plan = _prepare(lambda: prepare(first_stage(spec), run_dir=run_dir, storage=args.storage,
                                    resume=request.resume), spec.name)
    return _run(spec, run_dir, args, trainer, plan=plan)


def resume(args: argparse.Namespace) -> int:
    ResumeRequest.from_namespace(args)  # the study's name checked as the service checks it
    check_root(args.root)
    trainer = import_trainer(args.trainer)
    run_dir = Path(args.root) / args.study

    def check(spec: StudySpec) -> None:
        try:
            check_inputs(spec)  # the corpus and model files may have changed since submit
        except SpecError as e:
            raise UsageError(f"study {spec.name!r}: {e}") from None

    if not args.storage and not (run_dir / db.DB_FILE).exists():
        raise UsageError(f"no study {args.study!r}: {run_dir / db.DB_FILE} does not exist "
                         "(use --root or --storage to look elsewhere).")
    plan = _prepare(lambda: prepare_stored(args.study, run_dir=run_dir, storage=args.storage,
                                           check=check), args.study)
    return _run(plan.spec, run_dir, args, trainer, plan=plan)


def _forget_stop(plan: Any) -> None:
    """A study run again from the command line runs: the stop request an earlier ``moetune
    cancel`` left in its storage (which the run watches) is history."""
    if plan.study is not None:
        clear_stop(plan.study)


def _prepare(make: Any, name: str) -> Any:
    """The preflight, its refusals as usage errors (exit 2, nothing written)."""

    try:
        return make()
    except (db.StorageError, rs.ResumeSpecError, st.SchemaError, ls.LeaseHeld,
            FileExistsError, SpecError) as e:
        # SpecError: [start] warm_start names no usable study (looked up before any write)
        raise UsageError(str(e)) from None
    except (st.IncompleteStudy, LookupError) as e:
        raise UsageError(str(e)) from None


def _sampler_note(spec: StudySpec) -> None:
    """What ``sampler = "auto"`` chose, when the choice needs a reason (`SAMPLER_NOTES`)."""

    note = SAMPLER_NOTES.get(resolve_sampler_name(spec)) if spec.study.sampler == "auto" else None
    if note:
        print(f"moetune: note: {note}", file=sys.stderr)


def check_root(root: str) -> None:
    """``--root`` names a folder (or nothing yet): checked before Ray starts."""
    path = Path(root)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--root: must be a folder (or a path to create one), but {root!r} "
                         "is a file.")


def _run(spec: StudySpec, run_dir: Path, args: argparse.Namespace, trainer: Any, *,
         plan: Any) -> int:
    """Run ``spec`` from its prepared first stage (``plan``): a study, or a whole ladder or law
    stage by stage (`stage_runner.run_stages`)."""
    from tuner.study.trial.cluster import ClusterError

    # the clip notes of the start points (of the first stage; later stages print none here)
    for warning in plan.warnings:
        print(f"moetune: warning: {warning}", file=sys.stderr)
    _sampler_note(spec)
    signals = DeferredStop()
    try:
        with signals:
            _forget_stop(plan)
            summaries = run_stages(spec, run_dir=run_dir, plan=plan, storage=args.storage,
                                   trainer=trainer, address=args.address,
                                   progress=not args.no_progress, interrupt=signals)
    except (ClusterError, db.StorageError, rs.ResumeSpecError, st.SchemaError, ls.LeaseHeld,
            FileExistsError, SpecError) as e:
        # FileExistsError: another submit of the same name created the study after our look;
        # SpecError: [start] warm_start names no usable study (looked up before any write)
        raise UsageError(str(e)) from None
    except (db.StorageFault, ls.LeaseLost) as e:
        print(f"moetune: {e}; nothing is left RUNNING that the storage could record, and "
              f"`moetune resume {spec.name}` continues the study once the storage works.",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"moetune: interrupted; `moetune resume {spec.name}` continues the study.",
              file=sys.stderr)
        return signals.exit_code()
    if spec.kind == "ladder":
        return _report_ladder(spec, run_dir, summaries, args.storage)
    if spec.kind == "law":
        return _report_law(spec, run_dir, summaries, args.storage)
    return _report_run(spec, run_dir, summaries[0])


def _report_law(spec: StudySpec, run_dir: Path, budgets: list[Any], storage: str) -> int:
    """Each budget's line, each budget's own report, the law's report (the answer)."""
    law = spec.law
    for i, summary in enumerate(budgets):
        print(f"budget {i} ({law.budgets[i]} tokens per trial): study {summary.name}: "
              f"{summary.done}/{summary.n_trials} trials done")
        _build_report(summary.study, run_dir if i == 0 else run_dir.parent / summary.name)
    if budgets:
        print(f"storage {budgets[-1].storage}")
    def write() -> Mapping[str, Path]:
        from reports.laws.law import write_law_report

        return write_law_report(spec, url=db.storage_url(run_dir, storage, spec.study.storage),
                                out=run_dir / "law", budget_report=run_dir / "report",
                                loaded={s.name: s.study for s in budgets})

    paths = _written("law report", write)
    if paths is not None:
        from reports.laws.law import answer_line

        print(answer_line(json.loads(paths["json"].read_text())))
    last = budgets[-1] if budgets else None
    if len(budgets) < len(law.budgets) or last is None or last.done < last.n_trials:
        print(f"moetune: law {spec.name!r} stopped before its last budget; "
              f"`moetune resume {spec.name}` goes on.", file=sys.stderr)
        return 1
    return 0


def _report_ladder(spec: StudySpec, run_dir: Path, rungs: list[Any], storage: str) -> int:
    """Each rung's line, the top rung's report (the answer), the ladder's transfer report."""

    widths = spec.ladder.widths
    for i, summary in enumerate(rungs):
        print(f"rung {i} (width {widths[i]}): study {summary.name}: "
              f"{summary.done}/{summary.n_trials} trials done")
    last = rungs[-1] if rungs else None
    if last is not None:
        print(f"storage {last.storage}")
        _build_report(last.study, run_dir.parent / last.name if len(rungs) > 1 else run_dir)
    _build_ladder_report(spec, run_dir, storage)
    top = rung_name(spec.name, widths, len(widths) - 1)
    if len(rungs) < len(widths) or last is None or last.done < last.n_trials:
        print(f"moetune: ladder {spec.name} stopped before its top rung ({top}); "
              f"`moetune resume {spec.name}` goes on.", file=sys.stderr)
        return 1
    return 0


def _build_ladder_report(spec: StudySpec, run_dir: Path, storage: str) -> None:
    """The ladder's transfer report; a failure is a warning (the rungs are safe in storage)."""
    def write() -> Mapping[str, Path]:
        from reports.laws.ladder import write_ladder_report

        return write_ladder_report(spec, url=db.storage_url(run_dir, storage,
                                                             spec.study.storage),
                                   out=run_dir / "ladder")

    _written("ladder report", write)


def _report_run(spec: StudySpec, run_dir: Path, summary: Any) -> int:

    if summary.reaped:
        print(f"re-ran {len(summary.reaped)} interrupted trial(s): {list(summary.reaped)}")
    print(f"study {spec.name}: {summary.done}/{summary.n_trials} trials done; "
          f"storage {summary.storage}; run folder {run_dir}")
    study = summary.study
    _build_report(study, run_dir)
    if summary.done < summary.n_trials:  # e.g. Ctrl-C: Ray stops the trials and returns
        print(f"moetune: study {spec.name} stopped early; `moetune resume {spec.name}` "
              "finishes it.", file=sys.stderr)
        return 1
    failed = all_failed(study)
    if failed:
        print(f"moetune: study {spec.name}: {failed}", file=sys.stderr)
        return 1
    return 0


def _build_report(study: Any, run_dir: Path) -> None:
    """Write the study's report; a failure is a warning (the study is safe in storage)."""
    snapshot = None

    def write() -> Mapping[str, Path]:
        import reports

        nonlocal snapshot
        snapshot = reports.take_snapshot(study)
        return reports.write_report(snapshot, run_dir / "report")

    if _written("report", write) is None or snapshot is None:
        return
    from reports.sections.recommend import markdown, recommend

    # what to run, as the report's first section says it (plain text: no markdown fences)
    print("\n" + "\n".join(line for line in markdown(recommend(snapshot))
                            if not line.startswith("```")).replace("**", ""))


def _written(what: str, write: Callable[[], Mapping[str, Path]]) -> Mapping[str, Path] | None:
    """The files ``write`` wrote, each printed as ``<what>: <path>``; None, with a warning,
    when it failed: the studies are safe in storage, so a missing report is said, and the
    command's exit code stays the run's."""
    try:
        paths = write()
    except Exception as e:  # noqa: BLE001 - say why the report is missing, keep the exit code
        print(f"warning: the {what} could not be written: {type(e).__name__}: {e}",
              file=sys.stderr)
        return None
    for p in paths.values():
        print(f"{what}: {p}")
    return paths


def import_trainer(target: str) -> Any:
    module, _, attr = target.partition(":")
    if not module or not attr:
        raise UsageError(f"--trainer: must be MODULE:FUNCTION, but got {target!r}.")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise UsageError(f"--trainer: cannot import {target!r} ({e}).") from None
    if not callable(fn):
        raise UsageError(f"--trainer: {target!r} is not callable.")
    return fn


def open_study(name: str, run_dir: Path, url: str) -> Any:
    """The existing study ``name`` (read-only lookup), or UsageError saying where it looked.
    A law's budget or a ladder's rung (``law.t2621440``) lives in its base study's storage:
    without ``url``, that folder's file is read when ``run_dir`` holds none."""
    run_dir = run_dir if url else stage_home(name, run_dir)
    try:
        store = db.open_existing_storage(db.storage_url(run_dir, url))
    except db.StorageError as e:
        raise UsageError(str(e)) from None
    except LookupError as e:
        if not url and not (run_dir / db.DB_FILE).exists():
            raise UsageError(f"no study {name!r}: {run_dir / db.DB_FILE} does not exist "
                             "(use --root or --storage to look elsewhere).") from None
        raise UsageError(f"no study {name!r}: {e}") from None
    try:
        return st.load_study(name, store)
    except (LookupError, st.SchemaError) as e:
        raise UsageError(str(e)) from None


def stage_home(name: str, run_dir: Path) -> Path:
    """The folder whose storage holds study ``name``: ``run_dir`` when it has a storage file,
    else the base study's folder of a law budget (``<base>.t<tokens>``) or a ladder rung
    (``<base>.w<width>``) when that one has it, else ``run_dir``."""
    for sep in (BUDGET_SEP, RUNG_SEP):
        base = name.rsplit(sep, 1)[0]
        if (run_dir / db.DB_FILE).exists() or base == name:
            continue
        home = run_dir.parent / base
        if (home / db.DB_FILE).exists():
            return home
    return run_dir


# -- status / list / rerun -------------------------------------------------------------------


def status(args: argparse.Namespace) -> int:

    if args.study:
        study = open_study(args.study, Path(args.root) / args.study, args.storage)
        print(format_table(trial_rows(study)))
        import reports  # the ranking (Pareto rank, then crowding) as the report computes it

        print("\nTop of the ranking:")
        print(reports.top_table(reports.trials_frame(study), 5))
        _to_check(study)
        budgets = _law_rows(study)
        if budgets:
            print("\nBudgets of the law:")
            print(format_table(budgets))
        return 0
    studies = [open_study(n, Path(args.root) / n, args.storage) for n in _names(args)]
    print(format_table(study_summary_rows(studies)) if studies else "no studies")
    return 0


def _to_check(study: Any) -> None:
    """The report's warnings on its recommended trial (a value at its range's edge with the
    range to tune next, a knob that never varied, ...), so status says them too."""
    import reports
    from reports.sections.recommend import recommend

    rec = recommend(reports.take_snapshot(study))
    if rec is not None and rec.warnings:
        print(f"\nTo check, on the recommended trial #{rec.trial}:")
        print("\n".join(f"- {w}" for w in rec.warnings))


def _law_rows(study: Any) -> list[dict[str, Any]]:
    try:
        return law_budget_rows(study)
    except (SpecError, st.IncompleteStudy):  # a stored spec that no longer reads: no law rows
        return []


def list_studies(args: argparse.Namespace) -> int:
    for name in _names(args):
        print(name)
    return 0


def _names(args: argparse.Namespace) -> list[str]:
    if args.storage:
        try:
            return sorted(db.study_names(db.open_existing_storage(args.storage)))
        except (LookupError, db.StorageError) as e:
            raise UsageError(str(e)) from None
    root = Path(args.root)
    if not root.is_dir():
        return []
    return sorted(d.name for d in root.iterdir() if (d / db.DB_FILE).is_file())


def rerun(args: argparse.Namespace) -> int:
    from tuner.study.workflows.rerun import rerun_trial

    run_dir = Path(args.root) / args.study
    study = open_study(args.study, run_dir, args.storage)
    try:
        out = rerun_trial(study, args.trial, device=args.device, out_dir=run_dir,
                          log=stderr_lines("rerun"))
    except (LookupError, ValueError) as e:
        raise UsageError(str(e)) from None
    print(out)
    return 0
