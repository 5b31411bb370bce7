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
