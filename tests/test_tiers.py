"""The rule that puts a test in the fast or the integration tier (tests/tiers.py)."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
from tiers import ProcessGuard, starts_processes


def _item(function=None, fixtures=()):
    return SimpleNamespace(fixturenames=list(fixtures), function=function, _fixtureinfo=None)


def _spawns_python():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def _calls_a_helper_that_spawns():
    return _spawns_python()


def _asks_for_ray_by_name(request):
    return request.getfixturevalue("ray_session")


def _pure_arithmetic():
    return sum(range(10))


class _Harness:
    def start(self):
        return subprocess.Popen(["moetune", "serve"])


def _uses_a_harness_class():
    return _Harness().start()


@pytest.mark.parametrize("function, fixtures, integration", [
    (_spawns_python, (), True),
    (_calls_a_helper_that_spawns, (), True),        # followed through a test-package name
    (_uses_a_harness_class, (), True),              # and through a class's methods
    (_asks_for_ray_by_name, (), True),              # request.getfixturevalue("ray_session")
    (_pure_arithmetic, ("ray_session",), True),     # the fixture closure
    (_pure_arithmetic, ("private_postgres", "tmp_path"), True),
    (_pure_arithmetic, ("tmp_path", "monkeypatch"), False),
])
def test_the_rule_marks_what_starts_processes(function, fixtures, integration):
    assert starts_processes(_item(function, fixtures)) is integration


@pytest.mark.parametrize("argv, flagged", [
    ([sys.executable, "-m", "tuner", "serve"], True),
    (["chromium", "--headless"], True),
    ("su postgres -c initdb", True),
    (["g++", "--version"], False),                  # the attention kernel's build
    (["/tmp/x/broken-c++", "--version"], False),    # a toolchain under a prefixed name
    (["ninja", "-v"], False),
])
def test_the_guard_flags_programs_but_not_the_toolchain(argv, flagged):
    guard = ProcessGuard()
    seen = []
    guard.popen(lambda self, args, *a, **kw: seen.append(args))(None, argv)
    assert seen == [argv]  # the process still starts: the test fails at teardown, not inside
    assert bool(guard.started) is flagged


def test_no_test_is_marked_integration_by_hand():
    """The rule decides every tier (tiers.py): a hand mark would keep a test in the integration
    tier after it stopped starting processes, or hide that the rule misses one."""

    import tiers

    hand = [str(p.relative_to(tiers.TESTS_ROOT)) for p in sorted(tiers.TESTS_ROOT.rglob("*.py"))
            if p.name != "tiers.py" and f"mark.{tiers.MARK}" in p.read_text()]
    assert not hand, hand
