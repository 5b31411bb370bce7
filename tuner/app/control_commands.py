"""``moetune cancel`` and ``moetune delete`` on the command line (``--server`` sends them to a
service instead, see `tuner.app.remote`).

``cancel`` writes a stop request to the study's storage; its driver, wherever it runs (another
terminal, a service's Ray actor), stops its trials, records the in-flight ones as interrupted
and exits; ``moetune resume`` continues the study. ``delete`` removes a study that no driver
runs from its storage, and its run folder.
"""

from __future__ import annotations

import argparse
import getpass
import shutil
from pathlib import Path

import optuna
from optuna.trial import TrialState

from tuner.app.commands import open_study, where_options
from tuner.app.errors import UsageError
from tuner.study.store import records
from tuner.study.store.control import request_stop


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("cancel", help="ask a running study's driver to stop (resume "
                              "continues it)")
    p.add_argument("study")
    where_options(p)
    p.set_defaults(handler=cancel)
    p = subparsers.add_parser("delete", help="delete a study no driver runs, and its run folder")
    p.add_argument("study")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    where_options(p)
    p.set_defaults(handler=delete)


def cancel(args: argparse.Namespace) -> int:
    study = open_study(args.study, Path(args.root) / args.study, args.storage)
    if not _running(study):
        raise UsageError(f"study {args.study!r}: no trial is running, so there is no driver to "
                         "stop.")
    request_stop(study, by=getpass.getuser())
    print(f"study {args.study}: stop requested; its driver stops the running trials (recorded "
          f"as interrupted) within seconds. `moetune resume {args.study}` continues it.")
    return 0


def delete(args: argparse.Namespace) -> int:
    run_dir = Path(args.root) / args.study
    study = open_study(args.study, run_dir, args.storage)
    if _running(study):
        raise UsageError(f"study {args.study!r}: trials are running; cancel it first "
                         f"(`moetune cancel {args.study}`).")
    service = study.user_attrs.get(records.SERVICE) or {}
    if service.get("state") in ("queued", "starting", "running", "stopping"):
        raise UsageError(f"study {args.study!r}: a service holds it ({service['state']}); "
                         "cancel it there first.")
    if not args.yes:
        answer = input(f"delete study {args.study!r} ({len(study.trials)} trials) and "
                       f"{run_dir}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing deleted")
            return 1
    optuna.delete_study(study_name=args.study, storage=study._storage)
    if run_dir.is_dir():
        shutil.rmtree(run_dir)
    print(f"study {args.study}: deleted")
    return 0


def _running(study: optuna.Study) -> bool:
    return any(t.state == TrialState.RUNNING for t in study.get_trials(deepcopy=False))
