"""What every request handler of the service shares: its configuration, storage, scheduler and
auth, the study lookups, and the actions that both the JSON API and the web forms perform
(submit, cancel, resume, delete, report, export), so the two front ends cannot drift apart.

The rules each action applies live in modules of their own: a submitted spec's checks
(`submit_checks`), the caps and quotas (`limits`), ownership and run folders (`ownership`),
the report and export downloads (`downloads`); `Service` holds the state they share and calls
them in order.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import optuna
from fastapi import HTTPException

from tuner.app.requests import actions
from tuner.app.requests.actions import (
    CancelRequest,
    DeleteRequest,
    ExportRequest,
    RequestError,
    ResumeRequest,
)
from tuner.app.requests.studies import detail, enqueue, service_record, summary
from tuner.app.requests.submit import SubmitRequest, submitted_spec
from tuner.app.service import downloads, limits, ownership
from tuner.app.service import submit_checks as checks
from tuner.app.service.access.auth import Auth
from tuner.app.service.access.data_roots import is_path
from tuner.app.service.access.quotas import Held
from tuner.app.service.access.tokens import User
from tuner.app.service.config import ServiceConfig
from tuner.app.service.running.attached import Attached
from tuner.app.service.running.scheduler import Scheduler
from tuner.app.service.submit_checks import SubmitError
from tuner.app.service.views import View, ViewCache
from tuner.study.specs.spec import NAME_RE, StudySpec
from tuner.study.store import storage as st
from tuner.study.store.database import study_names
from tuner.study.workflows.stage_runner import first_stage

__all__ = ["Service", "ServiceConfig", "SubmitError"]


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
        self._reports = downloads.Reports()
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

    def held(self, user: str) -> Held:
        """What ``user`` holds against their quotas (`ownership.held`)."""
        return ownership.held(self.storage, self.config.root, user)

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
                                  check_table=lambda t: checks.check_table(t, self.config))
        except RequestError as e:
            raise SubmitError(str(e), field=e.field) from None
        checks.check_not_reserved(spec, self.config)
        limits.check_submit_caps(spec, self.config)
        # one submit per user at a time: two at once cannot both take the last study of a quota
        with self._user_locks.setdefault(user.name, threading.Lock()):
            return self._submit_checked(spec, user)

    def _submit_checked(self, spec: StudySpec, user: User) -> str:
        """`submit` past the checks that read no storage: the quota, stage names, the inputs
        of what the driver runs first (`stage_runner.first_stage`), the name free, the
        warm-start source; then the study and the run folders of it and its later stages,
        made and marked here (delete removes marked folders only)."""
        limits.check_submit_quota(spec, self.config, user, self.held(user.name))
        stages = checks.check_stage_names(spec, self.config, set(study_names(self.storage)))
        spec = first_stage(spec)
        checks.check_inputs(spec, self.config)
        checks.check_new_name(spec, self.config, set(study_names(self.storage)))
        checks.check_warm_start(spec, self.config)
        with ownership.marked_folders(self.config.root, (spec.name, *stages), spec.name):
            # no sampler: the driver gives the study its own when it starts it
            study = st.create_study(spec, self.storage)
        enqueue(study, user.name)
        self.scheduler.wake()
        return spec.name

    def cancel(self, request: CancelRequest, user: User) -> str:
        """Cancel the study (`actions.cancel`) for its owner or an admin; its state after."""
        return self._act(request.study, user, "cancel", lambda s: actions.cancel(s, request))

    def resume(self, request: ResumeRequest, user: User) -> str:
        """Queue the study again (`actions.resume`) for its owner or an admin; its state after.

        Raises:
            HTTPException: 507 when the owner's run folders are at their disk quota, 429 past
                ``--max-trials``.
        """

        def run(study: optuna.Study) -> str:
            owner = str(service_record(study).get("owner", ""))
            limits.check_resume_disk(self.config, owner, user, self.held(owner))
            limits.check_resume_caps(study, self.config, self.storage)
            return actions.resume(study, request)

        state = self._act(request.study, user, "resume", run)
        self.scheduler.wake()
        return state

    def _act(self, name: str, user: User, action: str,
             run: Callable[[optuna.Study], str]) -> str:
        """``run`` on study ``name`` for its owner or an admin; a refusal is a 409."""
        with self._changing(name):
            study = self.study(name)
            ownership.check_owned(study, user, action, self.config.attach_owners)
            try:
                state = run(study)
            except actions.Refused as e:
                raise HTTPException(409, str(e)) from None
        self.forget(name)
        return state

    def delete(self, request: DeleteRequest, user: User) -> None:
        """Delete the ended study (`actions.delete`) for its owner or an admin, and its run
        folder when this service made it at submit (marked); anything else there is kept."""
        root = self.config.root
        with self._changing(request.study):
            study = self.study(request.study)
            ownership.check_owned(study, user, "delete", self.config.attach_owners)
            name = study.study_name
            try:
                actions.delete(study, request, folder=ownership.made_here(root, name, name),
                               stage_folder=lambda stage: ownership.made_here(root, stage, name))
            except actions.Refused as e:
                raise HTTPException(409, str(e)) from None
        self.forget(name)

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
        changed since (`downloads.Reports`); an attached study's goes into the service's
        folder, not the command line's."""
        attached = self._storage_url(study) != self.config.storage_url
        out = (self.attached.report_dir(study.study_name) if attached
               else self.config.root / study.study_name) / "report"
        return self._reports.html(study, out)

    def export(self, request: ExportRequest) -> tuple[bytes, str, str]:
        """(body, file name, media type) of `export_download`."""
        body, file, media_type, _ = self.export_download(request)
        return body, file, media_type

    def export_download(self, request: ExportRequest) -> tuple[bytes, str, str, list[str]]:
        """(body, file name, media type, stderr lines) of the download ``request`` asks for
        (`downloads.export_download`), with the operator's team recipes (``serve
        --recipes``). ``request.reference`` names a study of this service's storage (the
        exported study's, for an attached one): any signed-in user may read any study, so
        another user's law study may be the reference.

        Raises:
            actions.RequestError: the export refuses a value, naming its flag.
            SubmitError: ``--target`` names a file outside the data roots.
        """
        study = self.study(request.study)
        if is_path(request.target):
            checks.check_file("--target", request.target, self.config)
        return downloads.export_download(study, request,
                                         run_dir=self.config.root / study.study_name,
                                         storage=self._storage_url(study),
                                         recipes=self.config.recipes)
