"""Session-wide fixtures shared by every test package."""

from __future__ import annotations

import logging

import pytest


@pytest.fixture(scope="session")
def ray_session():
    """ONE local Ray instance for the whole test session (starting Ray costs seconds).

    Tests that need a Ray of their own (a multi-node cluster, a driver killed with SIGKILL) run
    it in a subprocess so they never clash with this one.
    """
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING,
                 log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(autouse=True)
def _runs_outside_the_checkout(tmp_path_factory, monkeypatch):
    """A command a test runs without --root writes under a temporary MOETUNE_ROOT, never into
    ./runs of the checkout."""
    monkeypatch.setenv("MOETUNE_ROOT", str(tmp_path_factory.mktemp("moetune_root")))


# the two test tiers (fast, integration), decided by rule, not by hand: tests/tiers.py
from tiers import (  # noqa: E402, F401
    _fast_tier_guard,
    pytest_collection_modifyitems,
    pytest_configure,
)
