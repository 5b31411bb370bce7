"""A study on a real two-node Ray cluster on this machine, joined with ``--address``."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import optuna

from tuner.study.store import records

SPEC = """
[study]
name = "cluster"
n_trials = 6
max_concurrent = 2
[budget]
tokens_per_trial = 200
eval_every_tokens = 100
[pruning]
scheduler = "none"
[resources]
cpus_per_trial = 1
[space.params.lr]
type = "float"
low = 1e-4
high = 1e-2
log = true
"""

# Runs in its own process: the test session already has its own Ray instance.
DRIVER = textwrap.dedent("""
    import sys
    from ray.cluster_utils import Cluster
    from tuner.app.cli import main

    spec, root = sys.argv[1:3]
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1,
                      "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    try:
        rc = main(["submit", spec, "--root", root, "--address", cluster.address,
                   "--trainer", "tuner.testing:slow_train", "--no-progress"])
    finally:
        cluster.shutdown()
    sys.exit(rc)
""")


def test_trials_land_on_both_nodes_of_a_two_node_cluster(tmp_path):
    spec = tmp_path / "cluster.toml"
    spec.write_text(SPEC)
    root = tmp_path / "runs"
    done = subprocess.run([sys.executable, "-c", DRIVER, str(spec), str(root)],
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    study = optuna.load_study(study_name="cluster",
                              storage=f"sqlite:///{root / 'cluster' / 'study.db'}")
    assert [t.user_attrs[records.OUTCOME] for t in study.trials] == ["complete"] * 6
    nodes = {t.user_attrs[records.NODE] for t in study.trials}
    # One CPU per node and two trials at once: both nodes must have run trials.
    assert len(nodes) == 2, nodes
