"""The Ray cluster a study runs on: join one, reuse the running one, or start a local one, and
check before anything is written that one node can host a trial."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
from collections.abc import Iterator

import ray

from tuner.study.specs.spec import StudySpec


class ClusterError(ValueError):
    """The Ray cluster cannot be reached, or no node of it can host one trial of the spec."""


@contextlib.contextmanager
def ray_cluster(address: str | None, spec: StudySpec) -> Iterator[None]:
    """`connect_cluster`, and shut Ray down on exit if it was started here."""
    started = connect_cluster(address, spec)
    try:
        yield
    finally:
        if started:
            ray.shutdown()


def connect_cluster(address: str | None, spec: StudySpec) -> bool:
    """Join ``address``, or reuse an initialised Ray, or start a local one; then check that one
    node can host a trial (else the study would wait forever). True if Ray was started here.

    Raises:
        ClusterError: no cluster at ``address``, or no node has the CPUs/GPUs a trial needs.
    """
    started = False
    if not ray.is_initialized():
        check_reachable(address)
        try:
            with _keeping_sigterm_handler():
                ray.init(address=init_address(address), include_dashboard=False,
                         logging_level=logging.WARNING, log_to_driver=False)
        except (ConnectionError, ValueError, RuntimeError) as e:
            raise ClusterError(f"--address {address}: cannot connect to a Ray cluster "
                               f"({type(e).__name__}: {e})") from None
        started = True
    try:
        _check_capacity(spec)
    except ClusterError:
        if started:
            ray.shutdown()
        raise
    return started


def init_address(address: str | None) -> str:
    """What ``ray.init`` is given: ``address``, else ``RAY_ADDRESS`` (the user's own choice, as
    inside a Ray job), else ``"local"``, a Ray of this process' own. Ray reads a missing address
    as "the latest Ray started on this machine" (its /tmp/ray/ray_current_cluster): a study would
    join another process' Ray, another user's included, and die when that one shut down (two
    `moetune submit` on one machine; the test suite on two processes did)."""
    return address or os.environ.get("RAY_ADDRESS") or "local"


@contextlib.contextmanager
def _keeping_sigterm_handler() -> Iterator[None]:
    """``ray.init`` replaces the process' SIGTERM handler with ``sys.exit``
    (ray-project/ray@01a29b09, python/ray/_private/worker.py, ``init``); put the caller's
    back, so SIGTERM stops a driver the way its application chose (the CLI: like Ctrl-C)."""
    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if main and before is not None:
            signal.signal(signal.SIGTERM, before)


def check_reachable(address: str | None, timeout_s: float = 5.0) -> None:
    """A HOST:PORT where nothing listens makes ``ray.init`` retry for about two minutes; one TCP
    connect says so at once. ``auto`` and ``ray://`` client addresses are left to Ray.

    Raises:
        ClusterError: not HOST:PORT, or nothing accepts connections there.
    """
    if not address or address == "auto" or "://" in address:
        return
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ClusterError(f"--address: must be HOST:PORT (the head's GCS, e.g. 10.0.0.1:6379), "
                           f"auto or ray://HOST:PORT, but got {address!r}.")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise ClusterError(f"--address {address}: nothing accepts connections there ({e}); "
                           "start the head with `ray start --head` or check the address."
                           ) from None


def _check_capacity(spec: StudySpec) -> None:
    r = spec.resources
    need = {"CPU": r.cpus_per_trial, "GPU": r.gpus_per_trial}
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    if any(all(node.get(k, 0.0) >= v for k, v in need.items() if v > 0) for node in nodes):
        return
    most = {k: max((node.get(k, 0.0) for node in nodes), default=0.0) for k in need}
    raise ClusterError(
        f"resources: one trial needs cpus_per_trial = {r.cpus_per_trial} and gpus_per_trial = "
        f"{r.gpus_per_trial}, but no node of the Ray cluster has that much (the largest have "
        f"{most['CPU']:g} CPUs, {most['GPU']:g} GPUs); lower [resources] or join a larger "
        "cluster with --address.")
