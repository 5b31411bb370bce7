"""What the application sets up once at start-up, and nothing imports for its side effects:
log levels and filters for the libraries the study core drives. Library users of the core who
want the same quiet console call `configure_logging` themselves."""

from __future__ import annotations

import logging


class _DropRayRestoreHint(logging.Filter):
    """Ray Tune, when interrupted, tells the user to call ``Tuner.restore(path=...)``: wrong for
    a moetune study, which resumes from its storage (the CLI prints ``moetune resume NAME``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        # "Trials did not complete": the ones whose worker died, recorded with their reason
        message = record.getMessage()
        return "Tuner.restore(" not in message and "Trials did not complete" not in message


_QUIET = {
    # Optuna logs every trial it is told at INFO; the progress bar says enough.
    "optuna": logging.WARNING,
    # GPSampler warns that without the optional 'greenlet' package its L-BFGS-B runs
    # sequentially: a note about Optuna's internals a user can do nothing useful with.
    "optuna._gp.batched_lbfgsb": logging.ERROR,
    # Ray warns on every local start that token auth is on by default: a note for cluster
    # operators, not for someone running a study on this machine.
    "ray._private.authentication.authentication_token_setup": logging.ERROR,
    "ray.tune": logging.WARNING,
    # A trial whose worker died (crashed, killed for memory or at its time limit) is logged
    # with Ray's traceback; the study records it with its reason, and the trial folder's
    # error.txt keeps the traceback.
    "ray.tune.execution.tune_controller": logging.CRITICAL,
}
_configured = False


def configure_logging() -> None:
    """Quiet the libraries' chatter and drop Ray's misleading restore hint (idempotent)."""
    global _configured
    if _configured:
        return
    for name, level in _QUIET.items():
        logging.getLogger(name).setLevel(level)
    logging.getLogger("ray.tune.tune").addFilter(_DropRayRestoreHint())
    _configured = True


# Ray 2.60 takes the loopback address as its node's when this is "0" (ray/_private/services.py,
# get_node_ip_address), so a local Ray's GCS, raylet, workers and agents listen on 127.0.0.1
LOOPBACK_RAY = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def local_ray_on_loopback() -> None:
    """Bind a local Ray that this process may start to loopback (read when Ray is imported, so
    nothing happens once it is). Not for ``--address``: a cluster's nodes must reach the
    driver."""
    import os
    import sys

    if "ray" not in sys.modules and not os.environ.get("RAY_ADDRESS"):  # RAY_ADDRESS: joined
        for key, value in LOOPBACK_RAY.items():
            os.environ.setdefault(key, value)

