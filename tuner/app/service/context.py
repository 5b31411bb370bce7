"""What every request handler of the service shares: its configuration, storage, scheduler and
auth, and the actions that both the JSON API and the web forms perform (submit, cancel, resume,
delete, report, export), so the two front ends cannot drift apart."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import threading
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import ray
from fastapi import HTTPException

from trainers.presets import PUBLISHED_CONFIGS
from tuner.app.service.auth import Auth, may_change
from tuner.app.service.data_roots import OutsideDataRoots, check_path, is_path, spec_paths
from tuner.app.service.scheduler import Scheduler
from tuner.app.service.studies import (
    ACTIVE,
    ENDED,
    detail,
    enqueue,
    service_record,
    set_state,
    summary,
)
from tuner.app.service.tokens import User
from tuner.app.service.views import View, ViewCache
from tuner.study.specs.spec import NAME_RE, SpecError, StudySpec, check_inputs, parse_spec
from tuner.study.store import storage as st
from tuner.study.store.control import clear_stop, request_stop
from tuner.study.store.database import shown, study_names
from tuner.study.workflows import warm_start as ws

MAX_SPEC_BYTES = 256 * 1024
MAX_KEY_PARTS = 64  # dotted parts of one TOML key (`_toml`)
REPORT_KEY = ".built-for"  # in a report folder: what the report there was built from
MARKER = ".moetune-service"  # in a run folder the service made; delete removes only those


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
    # the operator's caps on a spec (0: none): n_trials, tokens_per_trial, trials at once
    max_trials: int = 0
    max_tokens_per_trial: int = 0
    max_concurrent_trials: int = 0


class SubmitError(ValueError):
    """A spec the service refuses; ``field`` names where (the message says the rule, the value)."""

    def __init__(self, message: str, field: str = "spec") -> None:
        super().__init__(message)
        self.field = field


def _check_inputs(spec: StudySpec) -> SpecError | None:
    """The spec's file checks: None if they pass, else the error (its ``field`` kept)."""
    try:
        check_inputs(spec)
    except SpecError as e:
        return e
    return None


def _check_table_inputs(table: dict[str, Any]) -> SpecError | None:
    """`_check_inputs` of a spec sent as its table to another process (parsed there, once)."""
    return _check_inputs(parse_spec(table))


# on a cluster, where the drivers run (data and model paths are cluster paths)
_check_on_cluster = ray.remote(num_cpus=0)(_check_table_inputs)


class Service:
    """The service's shared state and its actions."""

    def __init__(self, config: ServiceConfig, storage: optuna.storages.BaseStorage,
                 auth: Auth, scheduler: Scheduler) -> None:
        self.config = config
        self.storage = storage
        self.auth = auth
        self.scheduler = scheduler
        self.views = ViewCache(self._read_view)
        self._report_locks: dict[str, threading.Lock] = {}

    # -- lookups ---------------------------------------------------------------------------

    def names(self) -> list[str]:
        """The studies the API lists: every one in the storage whose name the service can
        address (another tool may have put a study of any name in a shared database)."""
        return sorted(n for n in study_names(self.storage) if NAME_RE.fullmatch(n))

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
            raise HTTPException(404, f"study: no study named {name!r}.") from None
        return st.load_study(name, self.storage)

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
        return (detail if kind == "detail" else summary)(self.study(name))

    # -- actions ---------------------------------------------------------------------------

    def submit(self, text: str, user: User, *, name: str | None = None,
               space: str | None = None) -> str:
        """Queue the study ``text`` (a spec TOML) declares; returns its name. ``space``: the
        TOML of the space file the spec names, sent along by a client that has it locally.

        Raises:
            SubmitError: the spec breaks a rule; nothing is created.
        """
        table = _toml("spec", text, self.config.max_body_bytes)
        if space is not None:
            table["space"] = _toml("space", space, self.config.max_body_bytes)
        if name is not None:
            table.setdefault("study", {})["name"] = name
        _check_service_rules(table)
        for field, value in spec_paths(table):
            self._check_path(field, value)
        try:
            spec = parse_spec(table)
        except SpecError as e:
            raise SubmitError(str(e), field=e.field) from None
        self._check_caps(spec)
        spec = _first_stage(spec)
        problem = (_check_inputs(spec) if self.config.local_ray else  # the one input check
                   ray.get(_check_on_cluster.remote(spec.to_dict())))
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
        folder.mkdir(parents=True)
        try:
            (folder / MARKER).write_text(f"{spec.name}\n")  # delete removes marked folders only
            # no sampler: the driver gives the study its own when it starts it
            study = st.create_study(spec, self.storage)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)  # nothing is left of a failed submit
            raise
        enqueue(study, user.name)
        self.scheduler.wake()
        return spec.name

    def cancel(self, study: optuna.Study, user: User) -> str:
        state = self._owned(study, user, "cancel")
        if state == "queued":
            set_state(study, "cancelled")
        elif state in ACTIVE:
            request_stop(study, by=user.name)
            set_state(study, "stopping")
        else:
            raise HTTPException(409, f"cancel: only a queued or running study can be "
                                     f"cancelled, but {study.study_name!r} is {state}.")
        self.forget(study.study_name)
        return str(service_record(study)["state"])

    def resume(self, study: optuna.Study, user: User) -> str:
        state = self._owned(study, user, "resume")
        if state not in ENDED or state == "finished":
            raise HTTPException(409, f"resume: only a cancelled, failed or interrupted study "
                                     f"can be resumed, but {study.study_name!r} is {state}.")
        clear_stop(study)
        set_state(study, "queued", error="")
        self.forget(study.study_name)
        self.scheduler.wake()
        return "queued"

    def delete(self, study: optuna.Study, user: User) -> None:
        state = self._owned(study, user, "delete")
        if state not in ENDED:
            raise HTTPException(409, f"delete: only a finished, cancelled, failed or "
                                     f"interrupted study can be deleted, but "
                                     f"{study.study_name!r} is {state}; cancel it first.")
        name = study.study_name
        optuna.delete_study(study_name=name, storage=self.storage)
        self.forget(name)
        folder = self.config.root / name
        if (not folder.is_symlink() and folder.is_dir() and (folder / MARKER).is_file()
                and folder.resolve().parent == self.config.root.resolve()):
            shutil.rmtree(folder)  # made by this service at submit; anything else is kept

    def report(self, study: optuna.Study) -> Path:
        """The study's report.html under its run folder, built again only when the study
        changed since (its trials, their states, the service's record: `_report_key`); one
        build at a time per study, so requests arriving together wait for the same build."""
        import reports

        out = self.config.root / study.study_name / "report"
        with self._report_locks.setdefault(study.study_name, threading.Lock()):
            key = _report_key(study)
            built = out / REPORT_KEY
            if built.is_file() and built.read_text() == key and (out / "report.html").is_file():
                return out / "report.html"
            paths = reports.build(study, out)
            built.write_text(key)
            return Path(paths["report_html"])

    def export(self, study: optuna.Study, options: dict[str, Any]) -> tuple[str, str]:
        """(text, file name) of ``moetune export`` with ``options`` (its flags, as JSON).

        Raises:
            SubmitError: an option breaks a rule (named as its command-line flag).
        """
        from tuner.app import export_command
        from tuner.export import formats
        from tuner.export.export import export_study
        from tuner.modeling.full_run import ExportError

        args = _export_args(options)
        if args.target and is_path(args.target):
            self._check_path("--target", args.target)
        try:
            if args.format not in formats.FORMATS:
                raise ValueError(f"--format: unknown name {args.format!r}; valid formats are "
                                 f"{sorted(formats.FORMATS)}.")
            pick = export_command.parse_pick(args)
            target = export_command.parse_target(args)
            # a law study exports its laws, as the command line does
            study, law, _ = export_command._law_answer(
                study, self.config.root / study.study_name, self.config.storage_url)
            full, _ = export_study(study, pick, target, law=law)
        except (LookupError, ValueError, ExportError) as e:
            raise SubmitError(str(e), field=str(e).split(":", 1)[0]) from None
        stem = f"{study.study_name}-{args.format}"
        if args.format in formats.NAMED_BY_FILE:  # torchtitan's --module: a Python identifier
            stem = re.sub(r"\W", "_", stem if stem[0].isalpha() else f"m_{stem}")
        return (formats.render(args.format, full, stem=stem),
                f"{stem}.{formats.SUFFIXES[args.format]}")

    def _check_caps(self, spec: StudySpec) -> None:
        """The operator's caps (`ServiceConfig.max_trials` and the others; 0 is none); a law
        study's trials are every budget's, its tokens per trial its largest budget's."""
        c = self.config
        law = spec.law
        n_trials, tokens = spec.study.n_trials, spec.budget.tokens_per_trial
        if law.on:
            n_trials = (law.trials or n_trials) * len(law.budgets) + (1 if law.held_out else 0)
            tokens = max(law.budgets)
        for field, value, cap, flag in (
                ("law.trials" if law.on else "study.n_trials", n_trials, c.max_trials,
                 "--max-trials"),
                ("law.tokens" if law.on else "budget.tokens_per_trial", tokens,
                 c.max_tokens_per_trial, "--max-tokens-per-trial"),
                ("study.max_concurrent", spec.study.max_concurrent, c.max_concurrent_trials,
                 "--max-concurrent-trials")):
            if cap and value > cap:
                raise SubmitError(f"{field}: must be <= {cap} on this service (serve {flag}), "
                                  f"but got {value}.", field=field)

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
            raise HTTPException(409, f"{action}: study {study.study_name!r} is not run by this "
                                     "service (it was submitted from the command line).")
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
        from tuner.study.workflows.law import budget_spec

        return budget_spec(spec, 0)
    if spec.ladder.on:
        from tuner.study.workflows.ladder import rung_spec

        return rung_spec(spec, 0, [])
    return spec


def _report_key(study: optuna.Study) -> str:
    """What a report is built from, in short: every trial's number, state and end time, and the
    study's attributes (the service's record, the measured noise)."""
    trials = [(t.number, t.state.name, str(t.datetime_complete or ""))
              for t in study.get_trials(deepcopy=False)]
    return json.dumps([trials, study.user_attrs], sort_keys=True, default=str)


def _toml(field: str, text: str, limit: int) -> dict[str, Any]:
    try:
        size = len(text.encode())
    except UnicodeEncodeError:  # a lone surrogate, sent as a JSON escape
        raise SubmitError(f"{field}: must be UTF-8 text, but holds a character that is not "
                          "(a lone surrogate).", field=field) from None
    for number, line in enumerate(text.splitlines(), 1):
        # tomllib's time grows with the square of a dotted key's parts (a 26 KB key: 3 s of
        # CPU); no spec needs more than a few, so a long one is refused before parsing
        head = line.split("=", 1)[0]
        if head.count(".") >= MAX_KEY_PARTS:
            raise SubmitError(f"{field}: a key must have fewer than {MAX_KEY_PARTS} dotted "
                              f"parts, but line {number} has {head.count('.') + 1}.",
                              field=field)
    if size > limit:
        raise SubmitError(f"{field}: must be at most {limit} bytes, but got {size}.",
                          field=field)
    try:
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError, ValueError) as e:
        raise SubmitError(f"{field}: not valid TOML ({str(e)[:200]}).", field=field) from None


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
    if isinstance(space, dict) and isinstance(space.get("file"), str):
        f = space["file"]
        if "/" in f or "\\" in f or f.startswith("."):
            raise SubmitError(f"space.file: must be the name of a search space shipped with "
                              f"moetune (e.g. 'deepseek_v3.toml') or the space inline, but got "
                              f"{f!r}; `moetune submit --server` inlines a local file.",
                              field="space.file")


class _Raising(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would print and exit
        raise SubmitError(message.replace("argument ", ""), field="export")


def _export_args(options: dict[str, Any]) -> argparse.Namespace:
    """`moetune export`'s own parser applied to ``{"pick": "knee", "gpus": 2048, ...}``."""
    from tuner.app import export_command

    parser = _Raising(prog="export")
    sub = parser.add_subparsers(dest="command")
    sub._parser_class = _Raising  # argparse has no public hook for the sub-parsers' class
    export_command.register(sub)
    argv = ["export", "study"]
    for key, value in options.items():
        if not isinstance(key, str) or not key.replace("_", "").isalnum():
            raise SubmitError(f"export: unknown option {key!r}.", field="export")
        flag = "--" + key.replace("_", "-")
        if flag in ("--root", "--storage", "--out"):
            raise SubmitError(f"{flag}: not an option of the service's export (the service "
                              "owns its storage; the file comes back as the response).",
                              field=flag)
        values = value if isinstance(value, list) else [value]
        argv += [flag, *(str(v) for v in values)]
    return parser.parse_args(argv)


