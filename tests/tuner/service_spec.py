"""The service tests' study spec: two objectives, a random sampler, three evaluations a trial.

A plain module (not conftest.py) shared by the in-process tests (`inprocess_service`) and the
real-server ones (`service_process`), so a fast-tier test need not import the real-server
harness to get it."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

from tests.utils.waiting import WaitTimeout, wait_until
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


class StudyWaits:
    """Polls of a study's status through the harness's ``call``: shared by the in-process
    service (`inprocess_service.InProcessService`) and the real one (`service_process.Server`),
    each with its own patience."""

    TRIALS_WAIT_S = 180.0
    STATE_WAIT_S = 180.0
    POLL_S = 0.2

    def call(self, method: str, path: str, body: Any = None, *, token: str | None = None,
             **kw: Any) -> tuple[int, Any]:
        raise NotImplementedError

    def wait_trials_running(self, name: str, *, token: str | None = None,
                            timeout_s: float | None = None) -> None:
        """Until the study has a trial in flight."""
        def running() -> bool:
            status, body = self.call("GET", f"/api/v1/studies/{name}", token=token)
            return status == 200 and body["progress"]["running"] > 0

        wait_until(running, what=f"study {name}: a trial started",
                   timeout=timeout_s or self.TRIALS_WAIT_S, poll_s=self.POLL_S)

    def wait_state(self, name: str, states: tuple[str, ...], *, token: str | None = None,
                   timeout_s: float | None = None) -> dict[str, Any]:
        """Until the study is in one of ``states``; its view then."""
        last: list[Any] = [None]

        def reached() -> dict[str, Any] | None:
            status, last[0] = self.call("GET", f"/api/v1/studies/{name}", token=token)
            return dict(last[0]) if status == 200 and last[0]["state"] in states else None

        try:
            return wait_until(reached, what=f"study {name} reached {states}",
                              timeout=timeout_s or self.STATE_WAIT_S, poll_s=self.POLL_S)
        except WaitTimeout as e:
            raise WaitTimeout(f"{e}; its last view: {last[0]}") from None
