"""How many times each process that runs a study parses its spec, checks its input files,
opens its storage, checks the resume rules and calls the lease, counted on the functions
themselves (`tests/tuner/call_counter.py`), for the CLI's submit, submit --resume and resume,
the service's submit and its driver starting the study. A two-trial study with the fake
`tuner.testing:quick_train` on a local Ray.

    python benchmarks/count_checks.py                      # this checkout
    PYTHONPATH=<other checkout> python benchmarks/count_checks.py   # another layout

The counts go by file and function name (``spec.py:parse_spec``, ``database.py:_rdb_storage``
...), so an older layout of tuner/study is counted the same way (docs/architecture.md, "Checks
counted per process").
"""

from __future__ import annotations

import importlib
import logging
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "tuner"))
from call_counter import counting  # noqa: E402
from test_tuner_resume import QT, SPEC  # noqa: E402 - the resume tests' two-trial spec

KEYS = ("spec parses", "input checks", "storage opens", "resume-rule checks", "lease calls",
        "samplers built", "study loads")


def _first(*names: str):
    """The first of ``names`` that imports (the store modules moved into tuner.study.store)."""
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError(names)


def main() -> None:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING,
             log_to_driver=False)
    from tuner.app.cli import main as cli
    from tuner.app.requests.studies import set_state
    from tuner.app.service.access.tokens import User
    from tuner.app.service.context import Service, ServiceConfig
    from tuner.app.service.running import driver

    db = _first("tuner.study.store.database", "tuner.study.database")
    st = _first("tuner.study.store.storage", "tuner.study.storage")
    tmp = Path(tempfile.mkdtemp())
    rows = []
    for n in (2, 3):
        (tmp / f"rnd{n}.toml").write_text(SPEC.format(n=n))
    root = str(tmp / "runs")
    for label, argv in (("CLI submit", ["submit", str(tmp / "rnd2.toml")]),
                        ("CLI submit --resume", ["submit", str(tmp / "rnd3.toml"), "--resume"]),
                        ("CLI resume NAME", ["resume", "rnd"])):
        with counting() as c:
            rc = cli([*argv, "--root", root, *QT])
        rows.append((f"{label} (exit {rc})", dict(c)))

    class NoScheduler:
        def wake(self) -> None:
            pass

    sroot = tmp / "service"
    sroot.mkdir()
    url = f"sqlite:///{sroot / 'service.db'}"
    storage = db.open_storage(url)
    service = Service(ServiceConfig(root=sroot, storage_url=url,
                                    trainer="tuner.testing:quick_train"),
                      storage, None, NoScheduler())
    try:  # a submit is a typed request since the one-preflight work; a plain spec text before
        from tuner.app.requests.submit import SubmitRequest
        submitted: object = SubmitRequest(spec=SPEC.format(n=2))
    except ImportError:
        submitted = SPEC.format(n=2)
    with counting() as c:
        service.submit(submitted, User(name="ann", admin=False))
    rows.append(("service, HTTP submit", dict(c)))
    set_state(st.load_study("rnd", storage), "starting")
    with counting() as c:
        state = driver.run_driver("rnd", url, str(sroot), "tuner.testing:quick_train")
    rows.append((f"service's driver, at start ({state})", dict(c)))
    print("| process | " + " | ".join(KEYS) + " |")
    print("|---|" + "---|" * len(KEYS))
    for label, c in rows:
        print(f"| {label} | " + " | ".join(str(c.get(k, 0)) for k in KEYS) + " |")


if __name__ == "__main__":
    main()
