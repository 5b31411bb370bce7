"""The service benchmarks, one entry point: ``python benchmarks/bench_service.py MODE [options]``.

    load  a real `moetune serve` under polling clients: status-read latency, submit to first trial
    app   CPU per request of the FastAPI app alone, in process through ASGI (``--ablate``)
    asgi  the service's own cost of one polled status read, N sequential ASGI requests
    page  how soon a finished study's page shows something, in headless Chromium

Each mode's module in benchmarks/service/ says what it measures and its exact commands
(``python benchmarks/bench_service.py MODE --help`` prints it); ``load --write`` appends its
"## Service under load" section to benchmarks/RESULTS.md, the others print their figures.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

# at the end, not the front: `app` and `asgi` measure whichever moetune comes first on sys.path
# (``PYTHONPATH=OTHER_CHECKOUT`` measures that one), as their own scripts did
sys.path.append(str(Path(__file__).resolve().parents[1]))

from benchmarks.service import MODES  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="mode", required=True, metavar="MODE")
    for name, module in MODES.items():
        mod = importlib.import_module(f"benchmarks.service.{module}")
        summary = " ".join(mod.__doc__.split("\n\n")[0].split())  # its first paragraph
        sp = sub.add_parser(name, help=summary, description=mod.__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(sp)
        sp.set_defaults(run=mod.run)
    a = p.parse_args(argv)
    return a.run(a)


if __name__ == "__main__":
    sys.exit(main())
