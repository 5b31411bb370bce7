"""The two test tiers, decided automatically (loaded by tests/conftest.py).

A test is ``integration`` when it starts a process of its own: Ray, a ``moetune serve``, a
PostgreSQL server, a browser, a ``python`` child. Everything else is the fast tier, the one to
run on every change::

    python -m pytest -q -n 2 -m "not integration"   # fast tier (in process: safe on 2 workers)
    python -m pytest -q                             # both tiers (CI: the fast tier first)

No test is marked by hand. At collection a test is integration when

- its fixture closure holds one of ``PROCESS_FIXTURES`` (``ray_session`` and every fixture built
  on it, the private PostgreSQL server), or its code names one (``request.getfixturevalue``), or
- its code or its fixtures' code, or any function or class of the test modules they call
  (followed through their names, at any depth), refers to ``subprocess``, to ``sys.executable``,
  or calls ``ray.init``.

The rule is kept honest at run time: in a test the rule put in the fast tier, starting a
program (``subprocess.Popen`` of an interpreter, Ray, a server, a browser) fails that test at
teardown naming the program, so a test cannot sit in the fast tier by slipping past the rule.
Allowed there: the C++ toolchain (the CPU attention kernel is compiled once per machine at first
use, `trainers.nn.attention`) and forked workers (``multiprocessing``), which start in
milliseconds and import nothing.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

MARK = "integration"
PROCESS_FIXTURES = frozenset({"ray_session", "private_postgres"})
PROCESS_MODULES = frozenset({"subprocess"})
# what a fast-tier test may start: the C++ toolchain that builds the attention kernel once
TOOLCHAIN = frozenset({"c++", "g++", "gcc", "cc", "clang", "clang++", "ninja", "ld", "which",
                       "uname", "ldconfig", "nvcc", "hipcc"})
TESTS_ROOT = Path(__file__).resolve().parent


def starts_processes(item: pytest.Item) -> bool:
    """Whether the collection rule (module docstring) puts ``item`` in the integration tier."""
    if PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    seen: set[int] = set()
    functions = [getattr(item, "function", None), *_fixture_functions(item)]
    return any(f is not None and _reaches_processes(f, seen) for f in functions)


def _fixture_functions(item: pytest.Item) -> Iterator[object]:
    """The functions of the fixtures ``item`` uses, at any depth (its fixture closure)."""
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info is not None else ()):
        for fixturedef in defs:
            if _in_tests(fixturedef.func):
                yield fixturedef.func


def _reaches_processes(obj: object, seen: set[int]) -> bool:
    """Whether ``obj`` (a function or class of the tests) refers to a process starter, directly
    or through the test-package functions and classes it names."""
    if id(obj) in seen:
        return False
    seen.add(id(obj))
    if isinstance(obj, type):
        return any(_reaches_processes(member, seen) for member in vars(obj).values()
                   if isinstance(member, types.FunctionType | staticmethod | classmethod
                                 | property | type))
    if isinstance(obj, staticmethod | classmethod):
        obj = obj.__func__
    if isinstance(obj, property):
        return any(f is not None and _reaches_processes(f, seen)
                   for f in (obj.fget, obj.fset, obj.fdel))
    if not isinstance(obj, types.FunctionType):
        return False
    code, module = obj.__code__, obj.__globals__
    names = set(_names(code))
    if PROCESS_FIXTURES & set(_strings(code)):  # request.getfixturevalue("ray_session")
        return True
    if "ray" in names and "init" in names:
        return True
    if "sys" in names and "executable" in names:
        return True
    for name in names:
        value = module.get(name)
        if isinstance(value, types.ModuleType) and value.__name__.split(".")[0] in PROCESS_MODULES:
            return True
        if value is not None and _in_tests(value) and _reaches_processes(value, seen):
            return True
    # a closure's free variables (a fixture's helper defined inside it)
    for cell in obj.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if _in_tests(value) and _reaches_processes(value, seen):
            return True
    return False


def _names(code: types.CodeType) -> Iterator[str]:
    """The global and attribute names ``code`` and its nested functions use."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _names(const)


def _strings(code: types.CodeType) -> Iterator[str]:
    """The string constants of ``code`` and its nested functions."""
    for const in code.co_consts:
        if isinstance(const, str):
            yield const
        elif isinstance(const, types.CodeType):
            yield from _strings(const)


def _in_tests(value: object) -> bool:
    """Whether ``value`` is a function or class defined in a file under tests/."""
    if not isinstance(value, types.FunctionType | type):
        return False
    try:
        source = inspect.getsourcefile(value)
    except TypeError:
        return False
    return (source is not None and Path(source).resolve().is_relative_to(TESTS_ROOT)
            and Path(source).resolve() != Path(__file__).resolve())


def mark_tiers(items: list[pytest.Item]) -> None:
    for item in items:
        if starts_processes(item):
            item.add_marker(getattr(pytest.mark, MARK))


class ProcessGuard:
    """Records the programs a fast-tier test starts (module docstring)."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def popen(self, original):
        guard = self

        def __init__(popen_self, args, *a, **kw):  # noqa: N807 (stands in for Popen.__init__)
            argv = [args] if isinstance(args, str | bytes | os.PathLike) else list(args)
            program = os.path.basename(os.fsdecode(argv[0])).split()[0] if argv else ""
            if not any(program == t or program.endswith("-" + t) for t in TOOLCHAIN):
                guard.started.append(" ".join(os.fsdecode(a) for a in argv)[:200])
            original(popen_self, args, *a, **kw)

        return __init__


@pytest.fixture(autouse=True)
def _fast_tier_guard(request, monkeypatch) -> Iterator[None]:
    if request.node.get_closest_marker(MARK) is not None:
        yield
        return
    guard = ProcessGuard()
    monkeypatch.setattr(subprocess.Popen, "__init__", guard.popen(subprocess.Popen.__init__))
    yield
    if guard.started:
        pytest.fail(f"this test is in the fast tier but started a process: {guard.started[0]!r}"
                    f"{f' (and {len(guard.started) - 1} more)' if len(guard.started) > 1 else ''}"
                    "; tests/tiers.py decides the tier: make the test reach its process through "
                    "a name the rule follows (a fixture in PROCESS_FIXTURES, or a call of "
                    "subprocess/ray.init in a test-package function)", pytrace=False)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARK}: starts a process of its own (Ray, a server, a "
                            "browser, a python child); set automatically by tests/tiers.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_tiers(items)


__all__ = ["MARK", "starts_processes"]
