"""Each study driver of the service has a Ray Tune registry of its own (issue 24, item 8): two
actors of one Ray job registering the same trainable name read back their own."""

from __future__ import annotations

import pytest
import ray

from tuner.app.service.running.driver import isolate_tune_registry


@ray.remote(num_cpus=0)
class Driver:
    """Registers a trainable under the name every study driver uses, tagged with its own
    study, then reads the name back, as Ray Tune's controller does."""

    def __init__(self, isolate: bool) -> None:
        if isolate:
            isolate_tune_registry()

    def register(self, study: str) -> None:
        from ray import tune
        from ray.tune.registry import register_trainable

        class Trainable(tune.Trainable):
            STUDY = study

        register_trainable("run_trial", Trainable)

    def read(self) -> str:
        from ray.tune.registry import get_trainable_cls

        return str(get_trainable_cls("run_trial").STUDY)


@pytest.mark.parametrize("isolate, a_reads", [(False, "b"), (True, "a")])
def test_two_drivers_of_one_job_read_their_own_trainable(ray_session, isolate, a_reads):
    # the session's one Ray (tests/conftest.py): a second ray.init in this process fails
    a, b = Driver.remote(isolate), Driver.remote(isolate)
    ray.get(a.register.remote("a"))
    ray.get(b.register.remote("b"))
    # without isolation the first driver gets the second's trainable (the bug); with it, its own
    assert ray.get(a.read.remote()) == a_reads
    assert ray.get(b.read.remote()) == "b"
