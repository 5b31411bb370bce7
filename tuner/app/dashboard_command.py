"""`moetune dashboard STUDY`: Optuna's dashboard on a study's storage, infeasible trials shown.

Plain ``optuna-dashboard sqlite:///runs/STUDY/study.db`` shows every trial of a moetune study as
feasible: it reads a trial's constraints from the single ``constraints`` list of Optuna < 5,
and Optuna 5 stores one ``constraints:<name>`` key per constraint
(`tuner.app.service.web.dashboard`). Writing the old list beside the new keys would make every
sampler see each constraint twice (Optuna 5 reads both forms), which changes what GPSampler
models (it adds one log-feasibility term per constraint; benchmarks/bench_constraint_keys.py
measures the proposals that change), so the stored trials keep
Optuna 5's keys alone and this command serves the dashboard over the same read-only view
``moetune serve`` mounts: the constraint list added in what the dashboard reads, every write
refused. Learning curves come from the trials' intermediate values (val_loss at each
evaluation, `tuner.study.trial.searcher`).

    moetune dashboard quickstart --port 8080     # then open http://127.0.0.1:8080
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tuner.app.commands import open_study, where_options
from tuner.app.service.web.dashboard import DashboardStorage


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``dashboard`` sub-command."""
    p = subparsers.add_parser("dashboard", help="optuna-dashboard on a study's storage, "
                              "read-only, with infeasible trials shown as infeasible")
    p.add_argument("study", help="study name (the dashboard lists every study of its storage)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: %(default)s)")
    p.add_argument("--port", type=int, default=8080, help="port (default: %(default)s)")
    where_options(p)
    p.set_defaults(handler=run_dashboard)


def dashboard_app(study: Any) -> Any:
    """optuna-dashboard's WSGI application over the read-only view of ``study``'s storage."""
    import optuna_dashboard


    return optuna_dashboard.wsgi(DashboardStorage(study._storage))


def run_dashboard(args: argparse.Namespace) -> int:
    from wsgiref.simple_server import make_server

    study = open_study(args.study, Path(args.root) / args.study, args.storage)
    with make_server(args.host, args.port, dashboard_app(study)) as server:
        print(f"moetune dashboard: study {args.study} at http://{args.host}:{args.port} "
              "(read-only; Ctrl-C stops it)")
        server.serve_forever()
    return 0
