"""``moetune``: the command line (also ``python -m tuner``).

Subcommands come from the modules in `COMMAND_MODULES`; each exposes ``register(subparsers)``
which adds its parsers and sets ``handler=fn(args) -> int`` on them. Adding a command to the CLI
is one line here.

Exit codes: 0 success, 1 a run-time failure, 2 bad input (nothing written).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMAND_MODULES: tuple[str, ...] = (
    "tuner.commands",
    "tuner.export_command",
    "tuner.report_command",
)


class UsageError(ValueError):
    """Bad command-line input: reported on stderr, exit status 2, nothing written."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="moetune",
        description="Hyperparameter autotuning for DeepSeek-V3-style MoE training recipes.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except UsageError as e:
        print(f"moetune {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("moetune: interrupted; `moetune resume` continues the study.", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
