"""Which Ray a study joins when it is given no --address: its own, never the latest one some
other process started on the machine."""

from __future__ import annotations

import pytest

from tuner.study.trial import cluster


def test_no_address_starts_a_ray_of_its_own(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert cluster.init_address(None) == "local"
    assert cluster.init_address("") == "local"


def test_ray_address_in_the_environment_is_the_users_choice(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert cluster.init_address(None) == "10.0.0.1:6379"


@pytest.mark.parametrize("address", ["10.0.0.2:6379", "auto", "ray://head:10001"])
def test_an_address_given_is_passed_as_it_is(monkeypatch, address):
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert cluster.init_address(address) == address


def test_connect_cluster_hands_ray_init_that_address(monkeypatch):
    """The call itself, with Ray's init replaced: no Ray is started."""
    seen = {}
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(cluster.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(cluster.ray, "init", lambda **kw: seen.update(kw))
    monkeypatch.setattr(cluster, "_check_capacity", lambda spec: None)
    assert cluster.connect_cluster(None, spec=None) is True  # type: ignore[arg-type]
    assert seen["address"] == "local"
