"""How many times each process that runs a study parses its spec, checks its input files,
opens its storage, checks the resume rules and calls the lease, counted on the functions
themselves (`tests/tuner/call_counter.py`), for the CLI's submit, submit --resume and resume,
the service's submit and its driver running the study; each for a plain study, a law and a
ladder. A two-trial study with the fake `tuner.testing:quick_train` on a local Ray; the law
(`LAW`: 4 budgets of 2 trials) and the ladder (`LADDER`: 2 rungs) are the same spec with their
section added, so each stage is one such study (a law's or ladder's counts are for all of its
stages, which one process runs).

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

LAW = "[law]\ntokens = [300, 1_000, 3_000, 10_000]\ntrials = 2\n"
LADDER = "[ladder]\nwidths = [32, 64]\npromote = 0.5\n"
KINDS = (("", ""), ("law", LAW), ("ladder", LADDER))

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

    set_state = _first("tuner.app.requests.studies", "tuner.app.service.studies").set_state
    User = _first("tuner.app.service.access.tokens", "tuner.app.service.tokens").User
    context = _first("tuner.app.service.context")
    driver = _first("tuner.app.service.running.driver", "tuner.app.service.driver")
    db = _first("tuner.study.store.database", "tuner.study.database")
    st = _first("tuner.study.store.storage", "tuner.study.storage")
    tmp = Path(tempfile.mkdtemp())
    rows = []
    for kind, section in KINDS:
        rows += _cli_rows(cli, tmp / (kind or "study"), section, kind)
    for kind, section in KINDS:
        rows += _service_rows(context, driver, db, st, set_state, User, tmp / f"service-{kind}",
                              section, kind)
    print("| process | " + " | ".join(KEYS) + " |")
    print("|---|" + "---|" * len(KEYS))
    for label, c in rows:
        print(f"| {label} | " + " | ".join(str(c.get(k, 0)) for k in KEYS) + " |")


def _label(kind: str, what: str) -> str:
    return f"{what}, {kind}" if kind else what


def _cli_rows(cli, folder: Path, section: str, kind: str) -> list[tuple[str, dict]]:
    folder.mkdir(parents=True)
    for n in (2, 3):
        (folder / f"rnd{n}.toml").write_text(SPEC.format(n=n) + section)
    root = str(folder / "runs")
    rows = []
    for label, argv in (("CLI submit", ["submit", str(folder / "rnd2.toml")]),
                        ("CLI submit --resume", ["submit", str(folder / "rnd3.toml"), "--resume"]),
                        ("CLI resume NAME", ["resume", "rnd"])):
        with counting() as c:
            rc = cli([*argv, "--root", root, *QT])
        rows.append((f"{_label(kind, label)} (exit {rc})", dict(c)))
    return rows


def _service_rows(context, driver, db, st, set_state, User, sroot: Path, section: str,
                  kind: str) -> list[tuple[str, dict]]:

    class NoScheduler:
        def wake(self) -> None:
            pass

    sroot.mkdir()
    url = f"sqlite:///{sroot / 'service.db'}"
    storage = db.open_storage(url)
    service = context.Service(context.ServiceConfig(root=sroot, storage_url=url,
                                                    trainer="tuner.testing:quick_train"),
                              storage, None, NoScheduler())
    try:  # a submit is a typed request since the one-preflight work; a plain spec text before
        submit_mod = _first("tuner.app.requests.submit", "tuner.app.submit")
        submitted: object = submit_mod.SubmitRequest(spec=SPEC.format(n=2) + section)
    except ImportError:
        submitted = SPEC.format(n=2) + section
    rows = []
    with counting() as c:
        service.submit(submitted, User(name="ann", admin=False))
    rows.append((_label(kind, "service, HTTP submit"), dict(c)))
    set_state(st.load_study("rnd", storage), "starting")
    with counting() as c:
        state = driver.run_driver("rnd", url, str(sroot), "tuner.testing:quick_train")
    rows.append((f"{_label(kind, 'service, driver run')} ({state})", dict(c)))
    return rows


if __name__ == "__main__":
    main()
