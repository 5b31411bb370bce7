"""The service on a two-node Ray cluster with PostgreSQL, as a team runs it on its head node:
trials land on both nodes, and a study keeps running while the HTTP process is killed and
restarted (its driver is a detached actor on the cluster, not a child of the service)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import optuna
import pytest
from optuna.trial import TrialState
from service_process import SPEC, Server

from tuner.study.store import records
from tuner.study.store.database import open_storage

POSTGRES = os.environ.get("MOETUNE_TEST_POSTGRES",
                          "postgresql://moetune:moetune@127.0.0.1:5432/moetune_test")

# Its own process: the cluster must outlive the service processes the test kills.
CLUSTER = textwrap.dedent("""
    import sys
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1,
                      "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    print(cluster.address, flush=True)
    sys.stdin.read()  # until the test closes our stdin
    cluster.shutdown()
""")


@pytest.fixture
def postgres_url():
    sqlalchemy = pytest.importorskip("sqlalchemy")
    try:
        engine = sqlalchemy.create_engine(POSTGRES.replace("postgresql://",
                                                           "postgresql+psycopg2://"))
        with engine.connect():
            pass
    except Exception as e:  # noqa: BLE001 - any failure to connect means: no server here
        pytest.skip(f"no PostgreSQL server at {POSTGRES} (.ci/run starts one): {e}")
    return POSTGRES


def test_a_cluster_service_survives_its_own_restart(postgres_url, tmp_path):
    cluster = subprocess.Popen([sys.executable, "-c", CLUSTER], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    name = f"cluster-svc-{os.getpid()}"
    try:
        address = cluster.stdout.readline().strip()
        assert address, "the cluster did not start"
        args = ("--address", address, "--storage", postgres_url)
        srv = Server(tmp_path / "root", extra=args).start()
        status, body = srv.call("POST", "/api/v1/studies", {"spec": SPEC.format(name=name,
                                                                                 n=6)})
        assert status == 201, body
        srv.wait_trials_running(name)
        srv.kill()  # the HTTP process only: the cluster and the study's driver stay up
        study = optuna.load_study(study_name=name, storage=open_storage(postgres_url))
        before = len([t for t in study.trials if t.state == TrialState.COMPLETE])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # trials keep finishing with no service running
            if len([t for t in study.trials if t.state == TrialState.COMPLETE]) > before:
                break
            time.sleep(0.5)
        else:
            pytest.fail("no trial finished while the service was down")
        srv.start()
        d = srv.wait_state(name, ("finished",), timeout_s=240)
        srv.stop()
        trials = optuna.load_study(study_name=name, storage=open_storage(postgres_url)).trials
        assert d["progress"]["done"] == 6
        assert [t.user_attrs.get(records.OUTCOME) for t in trials] == ["complete"] * 6
        assert len({t.user_attrs[records.NODE] for t in trials}) == 2  # both nodes ran trials
    finally:
        cluster.stdin.close()
        cluster.wait(timeout=120)
        try:
            optuna.delete_study(study_name=name, storage=open_storage(postgres_url))
        except KeyError:
            pass
