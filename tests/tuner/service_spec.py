"""The service tests' study spec: two objectives, a random sampler, three evaluations a trial.

A plain module (not conftest.py) shared by the in-process tests (`inprocess_service`) and the
real-server ones (`service_process`), so a fast-tier test need not import the real-server
harness to get it."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from tuner.app.cli import main

TEAM = (("alice", False), ("bob", False), ("ops", True))  # (user, admin)

SPEC = """
[study]
name = "{name}"
n_trials = {n}
max_concurrent = 2
sampler = "random"
[budget]
tokens_per_trial = 300
eval_every_tokens = 100
[objectives]
val_loss = "minimize"
tokens_per_s = "maximize"
[pruning]
scheduler = "none"
[space.params.lr]
type = "float"
low = 1e-4
high = 1e-2
log = true
[space.params.warmup_fraction]
type = "float"
low = 0.0
high = 0.2
"""


def create_team_tokens(root: Path) -> dict[str, str]:
    """`moetune token create` for each user of `TEAM` under ``root``: user -> token."""
    tokens = {}
    for user, admin in TEAM:
        argv = ["token", "create", user, "--root", str(root)] + (["--admin"] if admin else [])
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(argv) == 0
        tokens[user] = out.getvalue().strip()
    return tokens
