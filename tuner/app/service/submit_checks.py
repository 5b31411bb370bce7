"""What the service checks of a submitted spec beyond the spec's own rules: what a spec may not
do on a shared service (its own database, a space file from the service's disk), files only
under the data roots, a name that is none of the service's own files nor shaped like a law's
budget or a ladder's rung, every stage's name free, the inputs, the warm-start source.

Each check raises `SubmitError` naming the field, the rule and the value; `Service.submit`
calls them in order before anything is written.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Collection
from typing import Any

from search_spaces.loader import SPACES_DIR
from trainers.presets import PUBLISHED_CONFIGS
from tuner.app.service.access.data_roots import OutsideDataRoots, check_path, spec_paths
from tuner.app.service.access.private import reserved_name
from tuner.app.service.config import ServiceConfig
from tuner.app.service.running.cluster_checks import check_inputs_here, check_inputs_on_cluster
from tuner.study.run import warm_start as ws
from tuner.study.specs.spec import StudySpec
from tuner.study.store.database import shown, sqlite_path
from tuner.study.workflows.stage_runner import stage_names

# a law's budget (`law_spec.budget_name`) or a ladder's rung (`ladder_spec.rung_name`)
STAGE_SHAPE = re.compile(r"\.(t\d+(\.b\d+)?|w\d+)$")


class SubmitError(ValueError):
    """A spec the service refuses; ``field`` names where (the message says the rule, the value),
    ``status`` the HTTP answer (422; 429 or 507 past a quota)."""

    def __init__(self, message: str, field: str = "spec", status: int = 422) -> None:
        super().__init__(message)
        self.field = field
        self.status = status


def check_table(table: dict[str, Any], config: ServiceConfig) -> None:
    """A submitted spec's table against the service's rules, before it is parsed: no database
    or space file of its own (a shipped space's name is put inline), every file it names inside
    the data roots."""
    _check_service_rules(table)
    for field, value in spec_paths(table):
        check_file(field, value, config)


def check_file(field: str, value: str, config: ServiceConfig) -> None:
    """A file a request names must lie under the data roots (`data_roots`) or be one of
    moetune's published model configs."""
    try:
        check_path(field, value, (*config.data_roots, PUBLISHED_CONFIGS),
                   resolve=config.local_ray)
    except OutsideDataRoots as e:
        raise SubmitError(str(e), field=e.field) from None


def check_not_reserved(spec: StudySpec, config: ServiceConfig) -> None:
    """The study's name is none of what the service keeps in its root (its database, its
    attached reports, ...: `private.reserved_name`)."""
    taken = reserved_name(spec.name, config.root, sqlite_path(config.storage_url))
    if taken is not None:
        raise SubmitError(f"study.name: must not name what the service keeps in its root "
                          f"({taken}), but got {spec.name!r}; choose another name.",
                          field="study.name")


def check_stage_names(spec: StudySpec, config: ServiceConfig,
                      taken: Collection[str]) -> list[str]:
    """The names of the later stages of a law or ladder ``spec`` (none for a plain study),
    each free of the studies ``taken`` and of folders in the root: a study of a stage's name is
    made only by its law or ladder, so no name shaped like one is taken by anyone else, and no
    stage's study or folder exists yet (a new law never adopts another's study as its
    budget)."""
    if STAGE_SHAPE.search(spec.name):
        raise SubmitError(f"study.name: must not end like a law's budget or a ladder's "
                          f"rung ('.t<tokens>', '.t<tokens>.b<batch>', '.w<width>': only "
                          f"their law or ladder makes such a study), but got "
                          f"{spec.name!r}; choose another name.", field="study.name")
    stages = stage_names(spec)
    for name in stages:
        folder = config.root / name
        if name in taken or folder.exists() or folder.is_symlink():
            raise SubmitError(f"study.name: a law's budgets and a ladder's rungs must be "
                              f"new studies, but {name!r}, a stage of {spec.name!r}, "
                              "exists already; choose another name.", field="study.name")
    return stages


def check_inputs(spec: StudySpec, config: ServiceConfig) -> None:
    """The spec's input files (model config, corpus) checked once: here with the service's own
    Ray, else in a Ray task on the cluster that will read them."""
    problem = (check_inputs_here(spec) if config.local_ray else check_inputs_on_cluster(spec))
    if problem is not None:
        raise SubmitError(str(problem), field=problem.field)


def check_new_name(spec: StudySpec, config: ServiceConfig, taken: Collection[str]) -> None:
    """No study ``taken`` and no folder in the root has the study's name."""
    if spec.name in taken:
        raise SubmitError(f"study.name: must be a new study name, but {spec.name!r} "
                          "exists; choose another name.", field="study.name")
    folder = config.root / spec.name
    if folder.exists() or folder.is_symlink():
        raise SubmitError(f"study.name: must name no folder already in the service's "
                          f"root, but {spec.name!r} does (a study run from the command "
                          "line, or someone's files); choose another name.",
                          field="study.name")


def check_warm_start(spec: StudySpec, config: ServiceConfig) -> None:
    """The warm-start source opens now, not when the study's driver starts; the message names
    the service's database, never its URL (the root's path)."""
    if not spec.start.warm_start:
        return
    try:
        ws.open_source(spec, url=config.storage_url, run_dir=config.root / spec.name)
    except ws.WarmStartError as e:
        raise SubmitError(str(e).replace(shown(config.storage_url), "the service's database"),
                          field="start.warm_start") from None


def _check_service_rules(table: dict[str, Any]) -> None:
    """What a spec may not do on a shared service: name its own database, or read a space
    file from the service's disk (the CLI inlines a local space file before sending)."""
    study = table.get("study")
    if isinstance(study, dict) and study.get("storage"):
        raise SubmitError("study.storage: must be empty on a service (the service's database "
                          "holds every study), but got a URL.", field="study.storage")
    start = table.get("start")
    if isinstance(start, dict) and start.get("warm_start_storage"):
        raise SubmitError("start.warm_start_storage: must be empty on a service (a study warm-"
                          "starts from another study in the service's database), but got a "
                          "URL.", field="start.warm_start_storage")
    space = table.get("space")
    if isinstance(space, dict) and "file" in space:
        table["space"] = _shipped_space(space)


def _shipped_space(space: dict[str, Any]) -> dict[str, Any]:
    """``[space] file = NAME`` on a service: the shipped space NAME's table, read from
    moetune's own ``search_spaces/`` and put inline, so the spec's parse reads no file (it
    would look for NAME in the service's working folder first, outside the data roots).

    Raises:
        SubmitError: NAME is not a shipped space; the message lists those and says nothing
            about any file of that name elsewhere.
    """
    shipped = sorted(p.name for p in SPACES_DIR.glob("*.toml") if p.is_file())
    name = space["file"]
    if not isinstance(name, str) or name not in shipped:
        raise SubmitError(f"space.file: must name a search space shipped with moetune (one of "
                          f"{shipped}) or be left out for the space inline, but got "
                          f"{name!r}; `moetune submit --server` inlines a local file.",
                          field="space.file")
    rest = sorted(set(space) - {"file"})
    if rest:
        raise SubmitError(f"space: must set either file or inline params/fixed, not both, but "
                          f"got {rest}.", field="space")
    return tomllib.loads((SPACES_DIR / name).read_text())
