"""``moetune cancel`` and ``moetune delete`` on the command line (``--server`` sends them to a
service instead, see `tuner.app.remote`).

``cancel`` writes a stop request to the study's storage; its driver, wherever it runs (another
terminal, a service's Ray actor), stops its trials, records the in-flight ones as interrupted
and exits; ``moetune resume`` continues the study. ``delete`` removes a study that no driver
runs from its storage, and its run folder. Both are the service's actions too
(`tuner.app.requests.actions`); only who may act and the confirmation prompt are the command
line's.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tuner.app.commands import open_study, where_options
from tuner.app.requests import actions
from tuner.app.requests.actions import CancelRequest, DeleteRequest


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("cancel", help="ask a running study's driver to stop (resume "
                              "continues it)")
    p.add_argument("study", help="study name (as `moetune list` shows it)")
    where_options(p)
    p.set_defaults(handler=cancel)
    p = subparsers.add_parser("delete", help="delete a study no driver runs, and its run folder")
    p.add_argument("study", help="study name (as `moetune list` shows it)")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    where_options(p)
    p.set_defaults(handler=delete)


def cancel(args: argparse.Namespace) -> int:
    request = CancelRequest.from_namespace(args)
    study = open_study(request.study, Path(args.root) / request.study, args.storage)
    state = actions.cancel(study, request)
    if state == "stopping":
        print(f"study {request.study}: stop requested; its driver stops the running trials "
              f"(recorded as interrupted) within seconds. `moetune resume {request.study}` "
              "continues it.")
    else:
        print(f"study {request.study}: {state}")
    return 0


def delete(args: argparse.Namespace) -> int:
    request = DeleteRequest.from_namespace(args)
    run_dir = Path(args.root) / request.study
    study = open_study(request.study, run_dir, args.storage)
    actions.check_delete(study)  # refused before asking
    if not args.yes:
        answer = input(f"delete study {request.study!r} ({len(study.trials)} trials) and "
                       f"{run_dir}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing deleted")
            return 1
    actions.delete(study, request, folder=run_dir)
    print(f"study {request.study}: deleted")
    return 0
