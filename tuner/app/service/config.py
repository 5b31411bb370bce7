"""How `moetune serve` was started (`ServiceConfig`): its root and storage, how many studies run
at once, the spec files it may read, the operator's caps, each user's quotas and the team's own
recipes every export reads."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tuner.app.service.access.caps import Caps
from tuner.app.service.access.quotas import Quotas

MAX_SPEC_BYTES = 256 * 1024


@dataclass(frozen=True, kw_only=True)
class ServiceConfig:
    """How `moetune serve` was started."""

    root: Path  # run folders (Ray results, reports) live under it
    storage_url: str  # in memory only: never shown (see `database.shown`)
    trainer: str = "trainers:train"
    max_running: int = 2
    max_body_bytes: int = MAX_SPEC_BYTES
    # the service's own Ray (no --address): this machine is the cluster, so a spec's files are
    # checked here, without starting a Ray worker process for it
    local_ray: bool = True
    # the folders a spec's files may lie in (`data_roots`); none: only moetune's own configs
    data_roots: tuple[Path, ...] = ()
    # the operator's caps on a spec (0: none; `caps`): trainings (every trial and noise
    # re-training), tokens_per_trial, trials at once, every training's model width
    max_trials: int = 0
    max_tokens_per_trial: int = 0
    max_concurrent_trials: int = 0
    max_width: int = 0  # the model width (dim) of any training
    # `serve --attach STUDY=OWNER`: a command-line study under the root that OWNER (and the
    # admins) may cancel here; every other attached study is read-only
    attach_owners: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # each user's limits: studies kept, trainings at once, bytes of run folders (`quotas`)
    quotas: Quotas = Quotas()
    # `serve --recipes FILE`: the team's own past full runs (the recipe table's form, checked
    # at start), read first by the prior of every export here, as `export --recipes` locally
    recipes: Path | None = None

    def caps(self) -> Caps:
        """The operator's caps as `caps.check_caps` takes them."""
        return Caps(max_trials=self.max_trials, max_tokens_per_trial=self.max_tokens_per_trial,
                    max_concurrent_trials=self.max_concurrent_trials, max_width=self.max_width)
