"""``moetune``: the command line (also ``python -m tuner``).

Subcommands come from the modules in `COMMAND_MODULES`; each exposes ``register(subparsers)``
which adds its parsers and sets ``handler=fn(args) -> int`` on them. Adding a command to the CLI
is one line here. Building the parser imports no heavy library: each handler imports what it
uses (torch, Ray, pandas, plotting) when it runs, so ``moetune --help`` and ``moetune list``
start at once.

Exit codes: 0 success, 1 a run-time failure, 2 bad input (nothing written), 130 interrupted by
Ctrl-C (SIGINT), 143 stopped by SIGTERM; after either, in-flight trials are recorded as
interrupted and ``moetune resume`` re-runs them.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from tuner.app.remote import add_server_options, remote_dispatch
from tuner.app.requests.errors import UsageError, catch_sigterm, interrupted_exit_code
from tuner.app.startup import configure_logging, local_ray_on_loopback

COMMAND_MODULES: tuple[str, ...] = (
    "tuner.app.commands",
    "tuner.app.export_command",
    "tuner.app.dashboard_command",
    "tuner.app.validate_command",
    "tuner.app.report_command",
    "tuner.app.control_commands",
    "tuner.app.serve_command",
    "tuner.app.law_command",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="moetune",
        description="Hyperparameter autotuning for DeepSeek-V3-style MoE training recipes.")
    parser.add_argument("--version", action="version", version=f"moetune {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    add_server_options(subparsers)
    return parser


def _version() -> str:
    """The installed distribution's version (pyproject.toml's), or 'unknown' when the code
    runs from a checkout that was never installed."""
    try:
        return version("moetune")
    except PackageNotFoundError:
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging()
    before = catch_sigterm()
    try:
        if getattr(args, "server", None):
            return remote_dispatch(args)
        if getattr(args, "address", "") is None and args.command != "serve":
            local_ray_on_loopback()  # the service sets its own, token auth included
        return int(args.handler(args) or 0)
    except UsageError as e:
        print(f"moetune {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print("moetune: interrupted; `moetune resume` continues the study.", file=sys.stderr)
        return interrupted_exit_code(e)
    except BrokenPipeError:
        # the reader went away (`moetune status | head`): stop quietly. Python's advice for
        # SIGPIPE (https://docs.python.org/3/library/signal.html#note-on-sigpipe): point stdout
        # at devnull so the interpreter's final flush cannot fail again, and exit 1.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    finally:
        signal.signal(signal.SIGTERM, before)  # main() may be called in a longer-lived process


if __name__ == "__main__":
    sys.exit(main())
