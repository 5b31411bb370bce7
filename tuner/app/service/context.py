"""What every request handler of the service shares: its configuration, storage, scheduler and
auth, and the actions that both the JSON API and the web forms perform (submit, cancel, resume,
delete, report, export), so the two front ends cannot drift apart."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import re
import shutil
import threading
import tomllib
import zipfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

import optuna
from fastapi import HTTPException

from search_spaces.loader import SPACES_DIR
from trainers.presets import PUBLISHED_CONFIGS
from tuner.app.requests import actions
from tuner.app.requests.actions import (
    CancelRequest,
    DeleteRequest,
    ExportRequest,
    RequestError,
    ResumeRequest,
)
from tuner.app.requests.studies import (
    detail,
    enqueue,
    record_of,
    service_record,
    summary,
)
from tuner.app.requests.submit import SubmitRequest, submitted_spec
from tuner.app.service.access.auth import Auth, may_change
from tuner.app.service.access.caps import CapExceeded, Caps, check_caps, check_resume_cap
from tuner.app.service.access.data_roots import OutsideDataRoots, check_path, is_path, spec_paths
from tuner.app.service.access.private import reserved_name
from tuner.app.service.access.quotas import (
    Held,
    QuotaExceeded,
    Quotas,
    check_disk,
    check_submit,
    folder_bytes,
)
from tuner.app.service.access.tokens import User
from tuner.app.service.running.attached import MARKER, Attached
from tuner.app.service.running.cluster_checks import check_inputs_here, check_inputs_on_cluster
from tuner.app.service.running.scheduler import Scheduler
from tuner.app.service.views import View, ViewCache
from tuner.export import formats
from tuner.study.run import warm_start as ws
from tuner.study.specs.spec import NAME_RE, StudySpec
from tuner.study.store import storage as st
from tuner.study.store.database import shown, sqlite_path, study_names
from tuner.study.workflows.ladder import rung_spec
from tuner.study.workflows.law import budget_spec
from tuner.study.workflows.stage_runner import stage_names

MAX_SPEC_BYTES = 256 * 1024
REPORT_KEY = ".built-for"  # in a report folder: what the report there was built from
# a law's budget (`law_spec.budget_name`) or a ladder's rung (`ladder_spec.rung_name`)
STAGE_SHAPE = re.compile(r"\.(t\d+(\.b\d+)?|w\d+)$")


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


class SubmitError(ValueError):
    """A spec the service refuses; ``field`` names where (the message says the rule, the value),
    ``status`` the HTTP answer (422; 429 or 507 past a quota)."""

    def __init__(self, message: str, field: str = "spec", status: int = 422) -> None:
        super().__init__(message)
        self.field = field
        self.status = status


class Service:
    """The service's shared state and its actions."""

    def __init__(self, config: ServiceConfig, storage: optuna.storages.BaseStorage,
                 auth: Auth, scheduler: Scheduler) -> None:
        self.config = config
        self.storage = storage
        self.auth = auth
        self.scheduler = scheduler
        self.views = ViewCache(self._read_view)
        # the command line's studies under the root, listed read-only beside the service's own
        self.attached = Attached(config.root)
        self._report_locks: dict[str, threading.Lock] = {}
        self._change_locks: dict[str, threading.Lock] = {}
        self._user_locks: dict[str, threading.Lock] = {}

    # -- lookups ---------------------------------------------------------------------------

    def names(self) -> list[str]:
        """The studies the API lists: every one in the storage whose name the service can
        address (another tool may have put a study of any name in a shared database)."""
        own = {n for n in study_names(self.storage) if NAME_RE.fullmatch(n)}
        return sorted(own | set(self.attached.names()))

    def summaries(self) -> list[dict[str, Any]]:
        """Every listed study's summary; one deleted meanwhile is left out."""
        out = []
        for name in self.names():
            try:
                out.append(self.view(name, "summary"))
            except HTTPException as e:
                if e.status_code != 404:
                    raise
        return out

    def study(self, name: str) -> optuna.Study:
        """The study ``name``; 404 if there is none (a name that is not a study name too)."""
        if not NAME_RE.fullmatch(name):
            raise HTTPException(404, f"study: no study named {name!r}.")
        try:
            self.storage.get_study_id_from_name(name)
        except KeyError:
            found = self.attached.storage(name)  # a command-line study under the root
            if found is None:
                raise HTTPException(404, f"study: no study named {name!r}.") from None
            return st.load_study(name, found[1])
        return st.load_study(name, self.storage)

    def _storage_url(self, study: optuna.Study) -> str:
        """The URL of the storage ``study`` lives in: the service's, or an attached file's."""
        found = None if study.study_name in study_names(self.storage) else \
            self.attached.storage(study.study_name)
        return found[0] if found else self.config.storage_url

    def view(self, name: str, kind: str) -> dict[str, Any]:
        """``summary`` or ``detail`` of a study, at most `views.MAX_AGE_S` old and shared by
        every request (`views.ViewCache`): many clients polling one study cost one read of its
        trials, not one each. 404 for a study that does not exist."""
        return self.views.get(name, kind)[0]

    async def view_async(self, name: str, kind: str) -> View:
        """`view` and its JSON body, for the event loop: it never reads the storage itself."""
        if not NAME_RE.fullmatch(name):  # refused here, not queued behind the reads
            raise HTTPException(404, f"study: no study named {name!r}.")
        return await self.views.get_async(name, kind)

    def forget(self, name: str) -> None:
        """Drop the cached views of a study (after a change made here)."""
        self.views.forget(name)

    def _read_view(self, name: str, kind: str) -> dict[str, Any]:
        view = (detail if kind == "detail" else summary)(self.study(name))
        owner = self.config.attach_owners.get(name)
        if owner and view["state"] == "external":
            view |= {"owner": owner, "attached_owner": True}  # `serve --attach`
        return view

    # -- actions ---------------------------------------------------------------------------

    def submit(self, request: SubmitRequest, user: User) -> str:
        """Queue the study ``request`` declares (`tuner.app.requests.submit`); returns its name.

        Raises:
            SubmitError: the spec breaks a rule, or the request asks what a service submit does
                not do; nothing is created.
        """
        if request.resume:
            raise SubmitError(f"--resume: a service's submit makes a new study; continue one "
                              f"with its resume action (`moetune resume NAME --server`), but "
                              f"got resume={request.resume!r}.", field="--resume")
        try:
            spec = submitted_spec(request, max_bytes=self.config.max_body_bytes,
                                  check_table=self._check_table)
        except RequestError as e:
            raise SubmitError(str(e), field=e.field) from None
        taken = reserved_name(spec.name, self.config.root, sqlite_path(self.config.storage_url))
        if taken is not None:
            raise SubmitError(f"study.name: must not name what the service keeps in its root "
                              f"({taken}), but got {spec.name!r}; choose another name.",
                              field="study.name")
        self._check_caps(spec)
        # one submit per user at a time: two at once cannot both take the last study of a quota
        with self._user_locks.setdefault(user.name, threading.Lock()):
            return self._submit_checked(spec, user)

    def _submit_checked(self, spec: StudySpec, user: User) -> str:
        """`submit` past the checks that read no storage: the quotas, stage names, the inputs,
        the name free; then the study and its folders made."""
        try:
            check_submit(self.config.quotas.of(user.name, admin=user.admin), user.name,
                         self.held(user.name), spec.study.max_concurrent)
        except QuotaExceeded as e:
            raise SubmitError(str(e), field=e.field, status=e.status) from None
        stages = self._check_stage_names(spec)
        spec = _first_stage(spec)
        problem = (check_inputs_here(spec) if self.config.local_ray else  # the one input check
                   check_inputs_on_cluster(spec))
        if problem is not None:
            raise SubmitError(str(problem), field=problem.field)
        if spec.name in study_names(self.storage):
            raise SubmitError(f"study.name: must be a new study name, but {spec.name!r} "
                              "exists; choose another name.", field="study.name")
        folder = self.config.root / spec.name
        if folder.exists() or folder.is_symlink():
            raise SubmitError(f"study.name: must name no folder already in the service's "
                              f"root, but {spec.name!r} does (a study run from the command "
                              "line, or someone's files); choose another name.",
                              field="study.name")
        if spec.start.warm_start:  # refused now, not when its driver starts
            try:
                ws.open_source(spec, url=self.config.storage_url,
                               run_dir=self.config.root / spec.name)
            except ws.WarmStartError as e:  # the database's URL (the root's path) not shown
                raise SubmitError(str(e).replace(shown(self.config.storage_url), "the "
                                                 "service's database"),
                                  field="start.warm_start") from None
        # the run folders of the study and its later stages, made and marked here: delete
        # removes marked folders only
        folders = [self.config.root / n for n in (spec.name, *stages)]
        try:
            for made in folders:
                made.mkdir(parents=True)
                (made / MARKER).write_text(f"{spec.name}\n")
            # no sampler: the driver gives the study its own when it starts it
            study = st.create_study(spec, self.storage)
        except BaseException:
            for made in folders:  # nothing is left of a failed submit
                if (made / MARKER).is_file():
                    shutil.rmtree(made, ignore_errors=True)
            raise
        enqueue(study, user.name)
        self.scheduler.wake()
        return spec.name

    def _check_stage_names(self, spec: StudySpec) -> list[str]:
        """The names of the later stages of a law or ladder ``spec`` (none for a plain study),
        each free: a study of a stage's name is made only by its law or ladder, so no name
        shaped like one is taken by anyone else, and no stage's study or folder exists yet (a
        new law never adopts another's study as its budget)."""
        if STAGE_SHAPE.search(spec.name):
            raise SubmitError(f"study.name: must not end like a law's budget or a ladder's "
                              f"rung ('.t<tokens>', '.t<tokens>.b<batch>', '.w<width>': only "
                              f"their law or ladder makes such a study), but got "
                              f"{spec.name!r}; choose another name.", field="study.name")
        stages = stage_names(spec)
        taken = set(study_names(self.storage))
        for name in stages:
            folder = self.config.root / name
            if name in taken or folder.exists() or folder.is_symlink():
                raise SubmitError(f"study.name: a law's budgets and a ladder's rungs must be "
                                  f"new studies, but {name!r}, a stage of {spec.name!r}, "
                                  "exists already; choose another name.", field="study.name")
        return stages

    def cancel(self, request: CancelRequest, user: User) -> str:
        """Cancel the study (`actions.cancel`) for its owner or an admin; its state after."""
        return self._act(request.study, user, "cancel", lambda s: actions.cancel(s, request))

    def resume(self, request: ResumeRequest, user: User) -> str:
        """Queue the study again (`actions.resume`) for its owner or an admin; its state after.

        Raises:
            HTTPException: 507 when the owner's run folders are at their disk quota.
        """

        def run(study: optuna.Study) -> str:
            owner = str(service_record(study).get("owner", ""))
            try:  # an admin resuming is not limited
                check_disk(self.config.quotas.of(owner, admin=user.admin), owner,
                           self.held(owner))
            except QuotaExceeded as e:
                raise HTTPException(e.status, str(e)) from None
            self._check_resume_cap(study)
            return actions.resume(study, request)

        state = self._act(request.study, user, "resume", run)
        self.scheduler.wake()
        return state

    def _act(self, name: str, user: User, action: str,
             run: Callable[[optuna.Study], str]) -> str:
        """``run`` on study ``name`` for its owner or an admin; a refusal is a 409."""
        with self._changing(name):
            study = self.study(name)
            self._owned(study, user, action)
            try:
                state = run(study)
            except actions.Refused as e:
                raise HTTPException(409, str(e)) from None
        self.forget(name)
        return state

    def delete(self, request: DeleteRequest, user: User) -> None:
        """Delete the ended study (`actions.delete`) for its owner or an admin, and its run
        folder when this service made it at submit (marked); anything else there is kept."""
        with self._changing(request.study):
            study = self.study(request.study)
            self._owned(study, user, "delete")
            name = study.study_name
            try:
                actions.delete(study, request, folder=self._made_here(name, name),
                               stage_folder=lambda stage: self._made_here(stage, name))
            except actions.Refused as e:
                raise HTTPException(409, str(e)) from None
        self.forget(name)

    def held(self, user: str) -> Held:
        """What ``user`` holds against their quotas: the studies the service keeps for them
        (a law's or ladder's stages are its own, not counted apart) and the bytes of the run
        folders it made for those studies (each folder's mark names its study)."""
        mine = {frozen.study_name for frozen in self.storage.get_all_studies()
                if record_of(frozen.user_attrs).get("owner") == user}
        folders = []
        root = self.config.root
        for folder in root.iterdir() if root.is_dir() else ():
            mark = folder / MARKER
            if (not folder.is_symlink() and mark.is_file()
                    and mark.read_text().strip() in mine):
                folders.append(folder)
        return Held(studies=len(mine), disk_bytes=folder_bytes(folders))

    def _made_here(self, folder_name: str, study: str) -> Path | None:
        """``ROOT/folder_name`` when this service made it at submit for ``study`` (its mark
        names ``study``), else None: delete removes no other folder."""
        folder = self.config.root / folder_name
        mark = folder / MARKER
        made = (not folder.is_symlink() and folder.is_dir() and mark.is_file()
                and folder.resolve().parent == self.config.root.resolve()
                and mark.read_text().strip() == study)
        return folder if made else None

    @contextlib.contextmanager
    def _changing(self, name: str) -> Iterator[None]:
        """One change (cancel, resume, delete) of study ``name`` at a time in this service:
        each reads the state the one before it left, so of a burst one move wins and a move
        the new state does not allow is a 409 (a resume's "queued" is never followed by a
        delete of the queued study). A study deleted meanwhile is a 404, not optuna's
        KeyError."""
        with self._change_locks.setdefault(name, threading.Lock()):
            try:
                yield
            except KeyError:
                raise HTTPException(404, f"study: no study named {name!r} (deleted "
                                         "meanwhile).") from None

    def report(self, study: optuna.Study) -> Path:
        """The study's report.html under its run folder, built again only when the study
        changed since (its trials, their states, the service's record: `_report_key`); one
        build at a time per study, so requests arriving together wait for the same build."""
        import reports

        attached = self._storage_url(study) != self.config.storage_url
        # an attached study's report goes into the service's folder, not the command line's
        out = (self.attached.report_dir(study.study_name) if attached
               else self.config.root / study.study_name) / "report"
        with self._report_locks.setdefault(study.study_name, threading.Lock()):
            key = _report_key(study)
            built = out / REPORT_KEY
            if built.is_file() and built.read_text() == key and (out / "report.html").is_file():
                return out / "report.html"
            paths = reports.build(study, out)
            built.write_text(key)
            return Path(paths["report_html"])

    def export(self, request: ExportRequest) -> tuple[bytes, str, str]:
        """(body, file name, media type) of `export_download`."""
        body, file, media_type, _ = self.export_download(request)
        return body, file, media_type

    def export_download(self, request: ExportRequest) -> tuple[bytes, str, str, list[str]]:
        """(body, file name, media type, stderr lines) of the download ``request`` asks for:
        every file ``moetune export --out`` writes for it (`actions.export`), named after the
        study and the format (`formats.file_name`); one zip when there are several (a model
        config and its sidecar), else the launch config itself; and what the local export
        says on stderr (`actions.Exported.messages`).

        Raises:
            actions.RequestError: the export refuses a value, naming its flag.
            SubmitError: ``--target`` names a file outside the data roots.
        """

        study = self.study(request.study)
        if is_path(request.target):
            self._check_path("--target", request.target)
        file = formats.file_name(request.format, f"{study.study_name}-{request.format}")
        done = actions.export(study, request, run_dir=self.config.root / study.study_name,
                              storage=self._storage_url(study), file=file)
        said = done.messages(request.format)
        if len(done.files) == 1:
            return done.text.encode(), file, "text/plain", said
        return _zip(done.files), f"{PurePath(file).stem}.zip", "application/zip", said

    def _check_table(self, table: dict[str, Any]) -> None:
        """A submitted spec's table against the service's rules, before it is parsed: no
        database or space file of its own, every file it names inside the data roots."""
        _check_service_rules(table)
        for field, value in spec_paths(table):
            self._check_path(field, value)

    def _caps(self) -> Caps:
        c = self.config
        return Caps(max_trials=c.max_trials, max_tokens_per_trial=c.max_tokens_per_trial,
                    max_concurrent_trials=c.max_concurrent_trials, max_width=c.max_width)

    def _check_caps(self, spec: StudySpec) -> None:
        """The operator's caps (`caps.check_caps`: every training counted; 0 is none)."""
        try:
            check_caps(spec, self._caps())
        except CapExceeded as e:
            raise SubmitError(str(e), field=e.field) from None

    def _check_resume_cap(self, study: optuna.Study) -> None:
        """``--max-trials`` on a resume: the trainings the study and its stages made,
        interrupted ones included, and those the resume can still run (`caps.check_resume_cap`;
        a 429)."""
        spec = st.stored_spec(study)
        stages = st.find_studies(stage_names(spec), self.storage, loaded={study.study_name: study})
        try:
            check_resume_cap(spec, [study, *stages.values()], self._caps())
        except CapExceeded as e:
            raise HTTPException(429, str(e)) from None

    def _check_path(self, field: str, value: str) -> None:
        """A file a request names must lie under the data roots (`data_roots`)."""
        try:
            check_path(field, value, (*self.config.data_roots, PUBLISHED_CONFIGS),
                       resolve=self.config.local_ray)
        except OutsideDataRoots as e:
            raise SubmitError(str(e), field=e.field) from None

    def _owned(self, study: optuna.Study, user: User, action: str) -> str:
        rec = service_record(study)
        if rec["state"] == "external":
            owner = self.config.attach_owners.get(study.study_name)
            if owner is None or action != "cancel":
                # the service did not make it: it neither deletes nor runs it (a resume is
                # the command line's: `moetune resume`)
                offered = (f"; attached with owner {owner!r}: only cancel is offered here"
                           if owner else "")
                raise HTTPException(409, f"{action}: study {study.study_name!r} is not run by "
                                         f"this service (it was submitted from the command "
                                         f"line{offered}).")
            if not may_change(user, owner):
                raise HTTPException(403, f"{action}: only the study's owner ({owner!r}) or an "
                                         f"admin may {action} it.")
            return "external"
        if not may_change(user, rec.get("owner", "")):
            raise HTTPException(403, f"{action}: only the study's owner "
                                     f"({rec.get('owner')!r}) or an admin may {action} it.")
        return str(rec["state"])


def _first_stage(spec: StudySpec) -> StudySpec:
    """What a study's driver runs first, stored at submit: a law's budget 0
    (`tuner.study.workflows.law.budget_spec`), a ladder's bottom rung
    (`tuner.study.workflows.ladder.rung_spec`), else the spec itself. The driver then runs the
    law's budgets or the ladder's rungs in the
    service's storage, each an ordinary study there."""
    if spec.law.on:
        return budget_spec(spec, 0)
    if spec.ladder.on:
        return rung_spec(spec, 0, [])
    return spec


def _report_key(study: optuna.Study) -> str:
    """What a report is built from, in short: every trial's number, state and end time, and the
    study's attributes (the service's record, the measured noise)."""
    trials = [(t.number, t.state.name, str(t.datetime_complete or ""))
              for t in study.get_trials(deepcopy=False)]
    return json.dumps([trials, study.user_attrs], sort_keys=True, default=str)


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


def _zip(files: dict[str, str]) -> bytes:
    """The files as one zip archive, in their order, the same bytes for the same files (every
    entry dated 1980-01-01, zip's earliest date)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in files.items():
            archive.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), text,
                             compress_type=zipfile.ZIP_DEFLATED)
    return buffer.getvalue()
