"""The actions both front ends perform on a study, typed: `ExportRequest`, `CancelRequest`,
`DeleteRequest` and `ResumeRequest`, each checked when it is made (a bad value raises
`RequestError`, whose ``field`` names it), and one function per action that does it: `export`,
`cancel`, `delete`, `resume` (a service's; the command line's runs the study). Submit's request
is `tuner.app.requests.submit.SubmitRequest`.

The command line builds a request from its parsed flags (``from_namespace``), the service from
the request's JSON body or form and its path (``from_options``, the constructors), so neither
front end goes through the other's parser. Who may act (the service's owners and admins, the
command line's confirmation prompt) and where a study's files are stay with each front end;
what the action does, and what it refuses (`Refused`), is written here once.
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.app.requests.errors import UsageError
from tuner.app.requests.export_options import check_numbers, parse_target
from tuner.app.requests.studies import ACTIVE, ENDED, TransitionError, service_record, set_state
from tuner.export import formats
from tuner.export.answers import ladder_answer, law_answer, reference_offset, table_law
from tuner.export.backtest import backtest_lines
from tuner.export.export import export_study
from tuner.export.pick import PICKS, Pick
from tuner.modeling.anchor.answer import shipped_prior
from tuner.modeling.full_run import DEFAULT_MFU, ExportError
from tuner.modeling.hardware import HARDWARE
from tuner.study.specs.spec import NAME_RE
from tuner.study.store import storage as st
from tuner.study.store.control import clear_stop, request_stop
from tuner.study.workflows.stage import StageTaken, check_owned
from tuner.study.workflows.stage_runner import stage_names

if TYPE_CHECKING:
    import optuna

    from tuner.export.pick import Picked
    from tuner.modeling.full_run import FullRun


class RequestError(UsageError):
    """A request's value breaks a rule; ``field`` names it (as its flag, e.g. ``--gpus``)."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


class Refused(UsageError):
    """The study's state does not allow the action; nothing was changed."""


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _field_of(e: Exception) -> str:
    """The field an error names: its own ``field``, else the message's lead (``--gpus: ...``)."""
    return str(getattr(e, "field", "") or str(e).split(":", 1)[0])


def _check_study(name: object) -> None:
    """A study name is a folder's name under the root: not empty, no path in it."""
    if (not isinstance(name, str) or not name.strip() or "/" in name or "\\" in name
            or name in (".", "..") or "\0" in name):
        raise RequestError(f"study: must be a study name (a run folder's name, no path), but "
                           f"got {name!r}.", field="study")


# -- export ---------------------------------------------------------------------------------

_INTS = ("gpus", "seq_len", "global_batch", "micro_batch", "tp", "pp", "ep")
_FLOATS = ("tokens", "max_memory_gb", "min_tokens_per_s", "memory_fraction", "mfu", "lr")
_STRS = ("target", "hardware", "format")
_OPTIONAL = frozenset({"global_batch", "tp", "pp", "ep", "max_memory_gb", "min_tokens_per_s",
                       "lr"})
_OWN_STORAGE = "the service owns its storage; the file comes back as the response"
# the command line's own options of `moetune export`, each with why a service refuses it: where
# the studies are and where the file goes, and the files on the client's machine (a service
# reads no file a request names)
LOCAL_ONLY = {
    "root": _OWN_STORAGE, "storage": _OWN_STORAGE, "out": _OWN_STORAGE,
    "recipes": "the service reads no file a request names; the team's own past full runs reach "
               "every export of a service through its operator's `moetune serve --recipes "
               "FILE`, or export locally with --recipes",
    "law": "the service reads no file a request names; export locally with --law, or give the "
           "LR with --lr",
}


def local_only(key: str, value: Any) -> RequestError:
    """The refusal of ``key``, an option of the command line's export only (`LOCAL_ONLY`), by a
    service or by the ``--server`` client before it sends anything."""
    flag = _flag(key)
    return RequestError(f"{flag}: not an option of the service's export ({LOCAL_ONLY[key]}), "
                        f"but got {flag} {str(value)!r}.", field=flag)


@dataclass(frozen=True, kw_only=True)
class ExportRequest:
    """`moetune export`'s options: a study's chosen recipe scaled to a full run, in a format.
    Every value is checked when the request is made; the target is only named here (reading
    it is the export's, after a service has checked where it lies)."""

    study: str
    target: str  # a published config, a DeepSeek-style config JSON or a proxy preset
    gpus: int
    tokens: float  # training tokens of the full run
    pick: tuple[str, ...] = ("knee",)  # the report's recommendation; ("trial", "7"), ...
    max_memory_gb: float | None = None
    min_tokens_per_s: float | None = None
    hardware: str = "h800"
    seq_len: int = 4096
    global_batch: int | None = None
    micro_batch: int = 1
    tp: int | None = None
    pp: int | None = None
    ep: int | None = None
    memory_fraction: float = 0.9
    mfu: float = DEFAULT_MFU
    format: str = "native"
    lr: float | None = None  # the full run's LR (µP: the base LR), instead of any rule's
    lr_at_fitted_batch: bool = False  # write a law's LR measured at another batch, labelled
    lr_wide_band: bool = False  # write a law's LR whose band at the full run is over 4x
    # a law study of a reference configuration in the export's storage, whose measured offset
    # moves the prior (`tuner.export.answers.reference_offset`); a study's name, not a file
    reference: str | None = None

    def __post_init__(self) -> None:
        _check_study(self.study)
        if self.reference is not None and not (isinstance(self.reference, str)
                                               and NAME_RE.fullmatch(self.reference)):
            raise RequestError(f"--reference: must be a study's name (a law study of the "
                               f"reference configuration), but got --reference "
                               f"{self.reference!r}.", field="--reference")
        for flag in ("lr_at_fitted_batch", "lr_wide_band"):
            if not isinstance(getattr(self, flag), bool):
                name = "--" + flag.replace("_", "-")
                raise RequestError(f"{name}: must be true or false, but got "
                                   f"{getattr(self, flag)!r}.", field=name)
        for name in _INTS + _FLOATS + _STRS:
            value = getattr(self, name)
            if value is None and name in _OPTIONAL:
                continue
            kind = int if name in _INTS else (int, float) if name in _FLOATS else str
            if not isinstance(value, kind) or isinstance(value, bool):
                rule = ("an integer" if name in _INTS else "a number" if name in _FLOATS
                        else "text")
                raise RequestError(f"{_flag(name)}: must be {rule}, but got {_flag(name)} "
                                   f"{value!r}.", field=_flag(name))
        if not self.target.strip():
            raise RequestError("--target: must name a published config, a config JSON or a "
                               "proxy preset, but got ''.", field="--target")
        if self.format not in formats.FORMATS:
            raise RequestError(f"--format: unknown name {self.format!r}; valid formats are "
                               f"{sorted(formats.FORMATS)}.", field="--format")
        if self.hardware.lower() not in HARDWARE:
            raise RequestError(f"--hardware: unknown name {self.hardware!r}; valid names are "
                               f"{sorted(HARDWARE)}.", field="--hardware")
        self.pick_rule()
        try:
            check_numbers(self.namespace())
        except UsageError as e:
            raise RequestError(str(e), field=_field_of(e)) from None

    def pick_rule(self) -> Pick:
        """``pick`` and the limits as the pick's rule (``("trial", "7")``: trial 7)."""
        words = self.pick
        if (not isinstance(words, tuple) or not words
                or not all(isinstance(w, str) for w in words)):
            raise RequestError(f"--pick: must be one of {PICKS} (trial N), but got --pick "
                               f"{words!r}.", field="--pick")
        trial = None
        if words[0] == "trial":
            if len(words) != 2 or not (words[1].isascii() and words[1].isdigit()):
                raise RequestError(f"--pick: 'trial' takes one trial number, but got "
                                   f"--pick {' '.join(words)!r}.", field="--pick")
            trial = int(words[1])
        elif len(words) != 1 or words[0] not in PICKS:
            raise RequestError(f"--pick: must be one of {PICKS} (trial N), but got "
                               f"--pick {' '.join(words)!r}.", field="--pick")
        return Pick(kind=words[0], trial=trial, max_memory_gb=self.max_memory_gb,
                    min_tokens_per_s=self.min_tokens_per_s)

    def namespace(self) -> argparse.Namespace:
        """The request as `moetune export`'s parsed flags (what its target parsing reads)."""
        return argparse.Namespace(**dataclasses.asdict(self))

    def options(self) -> dict[str, Any]:
        """The request as the service's JSON body (`from_options` reads it back)."""
        out = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        out["pick"] = list(self.pick)
        del out["study"]
        return out

    @classmethod
    def from_namespace(cls, args: argparse.Namespace) -> ExportRequest:
        """From ``moetune export``'s parsed flags."""
        values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)}
        return cls(**values | {"pick": tuple(args.pick)})

    @classmethod
    def from_options(cls, study: str, options: Any) -> ExportRequest:
        """From a JSON body or a form: ``{"pick": "knee", "gpus": 2048, ...}``, keys the options'
        names (``seq_len``); a number may come as text (a form sends nothing else), ``pick`` as
        its words or one string of them."""
        if not isinstance(options, dict):
            raise RequestError(f"export: must be an object of export's options, but got "
                               f"{type(options).__name__}.", field="export")
        names = {f.name for f in dataclasses.fields(cls)} - {"study"}
        values: dict[str, Any] = {}
        for key, value in options.items():
            if not isinstance(key, str) or not key.replace("_", "").isalnum():
                raise RequestError(f"export: unknown option {key!r}.", field="export")
            flag = _flag(key)
            if key in LOCAL_ONLY:
                raise local_only(key, value)
            if key not in names:
                raise RequestError(f"{flag}: not an option of export; its options are "
                                   f"{sorted(names)}.", field=flag)
            if value is not None:
                values[key] = _option(key, value)
        for key in ("target", "gpus", "tokens"):
            if key not in values:
                raise RequestError(f"{_flag(key)}: required, but the request has none.",
                                   field=_flag(key))
        return cls(study=study, **values)


def _option(key: str, value: Any) -> Any:
    """One option's value from JSON or a form, as the request's type (a wrong one is left for
    the request to refuse with its rule)."""
    if key == "pick":
        if isinstance(value, str):
            return tuple(value.split())
        if isinstance(value, list) and all(isinstance(w, str | int) and not isinstance(w, bool)
                                           for w in value):
            return tuple(str(w) for w in value)
        return value
    if isinstance(value, str) and key in _INTS:
        text = value.strip()
        return int(text) if re.fullmatch(r"[+-]?[0-9]+", text) else value
    if isinstance(value, str) and key in _FLOATS:
        try:
            return float(value)
        except ValueError:
            return value
    return value


@dataclass(frozen=True)
class Exported:
    """What an export made: its files, the full run and the trial it scaled."""

    files: dict[str, str]  # name -> text: the launch config first, then its sidecar
    full: FullRun
    picked: Picked
    said: str  # which study answered, for a ladder or a law study; '' for any other

    @property
    def text(self) -> str:
        """The launch config."""
        return next(iter(self.files.values()))

    def messages(self, fmt: str) -> list[str]:
        """What ``moetune export`` says on stderr, after its ``moetune export: `` prefix: the
        warnings, the format's notes, which study answered, the team's own runs the prior read,
        the trial and its modeled cost, a law's backtest. The command line prints them, and a
        service sends them with the files (`MESSAGES_HEADER`) for its ``--server`` client to
        print, so the two say the same."""
        full, picked = self.full, self.picked
        out = [f"warning: {w}" for w in full.warnings]
        out += [f"note: {n}" for n in formats.NOTES[fmt](full)]
        out += [self.said] if self.said else []
        if full.target.recipes is not None:  # --recipes, or the service's serve --recipes
            team = [r.name for r in shipped_prior(full.target.recipes).rows if r.team]
            out.append("prior: the published recipes and the team's own runs, read first: "
                       + (", ".join(team) or "none that an AdamW prior reads"))
        # picked.how may end in a sentence's period: no ".;" where the plan follows
        out.append(f"trial {picked.record.number}: {picked.how.rstrip('.')}; {full.plan}; "
                   f"checkpoint_ratio {full.recipe.checkpoint_ratio:.3g}; "
                   f"{full.cost['gpu_hours']:.4g} GPU-hours (modeled)")
        if full.recipe.precision == "fp8":
            speed = full.cost["precision_speed"]
            out.append(f"{speed['source']}: block matmuls {speed['train_speedup']:.3g}x bf16 "
                       "(modeled)")
        return out + backtest_lines(full.backtest)


# the HTTP response header that carries an export's stderr lines (`Exported.messages`) as a
# JSON list, ASCII-escaped
MESSAGES_HEADER = "X-Moetune-Messages"


def export(study: optuna.Study, request: ExportRequest, *, run_dir: Path, storage: str,
           file: str | None = None, law_file: Path | None = None,
           recipes: Path | None = None) -> Exported:
    """Export ``study`` as ``request`` says: a ladder answers with its top rung, a law study
    with its laws (`tuner.export.answers`), moved by the offset against ``request.reference``
    (a law study of a reference configuration in the same storage:
    `tuner.export.answers.reference_offset`); the files are `formats.export_files`'s, the
    launch config named ``file`` (default `formats.file_name`). ``run_dir`` and ``storage``:
    where the study lives (its rungs and budgets live beside it). What each front end adds from
    its own files: ``law_file`` (the command line's ``--law``), a law.json of ``moetune law
    fit`` whose lr*(D, B) gives the LR instead; ``recipes`` (the command line's ``--recipes``, a
    service's ``serve --recipes``), the team's own past full runs, read first by the prior.

    Raises:
        RequestError: the target or the recipes cannot be read, the reference is not a law
            study there, nothing can be exported, or the file name does not suit the format;
            the field is named.
    """

    try:
        target = parse_target(argparse.Namespace(**vars(request.namespace()), recipes=recipes))
        offset = (reference_offset(study, request.reference, run_dir, storage)
                  if request.reference is not None else None)
        study, measured_at = ladder_answer(study, run_dir, storage)
        study, law, law_said = law_answer(study, run_dir, storage)
        if law_file is not None:
            law, law_said = table_law(law_file, study)
        full, picked = export_study(study, request.pick_rule(), target, law=law,
                                    offset=offset)
        files = formats.export_files(request.format, full,
                                     file or formats.file_name(request.format))
    except RequestError:
        raise
    except (LookupError, ValueError, ExportError) as e:
        raise RequestError(str(e), field=_field_of(e)) from None
    return Exported(files=files, full=full, picked=picked, said=measured_at or law_said)


# -- cancel and delete -------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CancelRequest:
    """Stop a study; ``by`` is who asks (recorded with the stop request)."""

    study: str
    by: str

    def __post_init__(self) -> None:
        _check_study(self.study)
        if not isinstance(self.by, str) or not self.by.strip():
            raise RequestError(f"by: must name who cancels, but got {self.by!r}.", field="by")

    @classmethod
    def from_namespace(cls, args: argparse.Namespace) -> CancelRequest:
        return cls(study=args.study, by=getpass.getuser())


@dataclass(frozen=True, kw_only=True)
class DeleteRequest:
    """Delete an ended study from its storage (and the run folder its front end names)."""

    study: str

    def __post_init__(self) -> None:
        _check_study(self.study)

    @classmethod
    def from_namespace(cls, args: argparse.Namespace) -> DeleteRequest:
        return cls(study=args.study)


@dataclass(frozen=True, kw_only=True)
class ResumeRequest:
    """Continue a cancelled, failed or interrupted study."""

    study: str

    def __post_init__(self) -> None:
        _check_study(self.study)

    @classmethod
    def from_namespace(cls, args: argparse.Namespace) -> ResumeRequest:
        return cls(study=args.study)


def resume(study: optuna.Study, request: ResumeRequest) -> str:
    """Queue a study a service runs again (its driver continues it from the storage); returns
    its state after. (``moetune resume`` without ``--server`` runs the study in its own process:
    `tuner.study.run.preflight.prepare_stored`.)

    Raises:
        Refused: the study is not cancelled, failed or interrupted.
    """
    state = service_record(study)["state"]
    if state not in ENDED or state == "finished":
        raise Refused(f"resume: only a cancelled, failed or interrupted study can be resumed, "
                      f"but {study.study_name!r} is {state}.")
    clear_stop(study)
    set_state(study, "queued", error="")
    return "queued"


def cancel(study: optuna.Study, request: CancelRequest) -> str:
    """Stop ``study``; returns its state after. A study a service runs: a queued one is
    cancelled at once, a running one gets a stop request and is ``stopping`` until its driver
    has stopped. A study run from the command line: a stop request its driver sees through the
    storage (``stopping``).

    Raises:
        Refused: nothing runs, so there is nothing to stop.
    """

    name = study.study_name
    state = service_record(study)["state"]
    if state == "external":
        if not _running(study):
            raise Refused(f"study {name!r}: no trial is running, so there is no driver to "
                          "stop.")
        request_stop(study, by=request.by)
        return "stopping"
    try:
        if state == "queued":
            set_state(study, "cancelled")
        elif state in ACTIVE:
            request_stop(study, by=request.by)
            set_state(study, "stopping")
        else:
            raise Refused(f"cancel: only a queued or running study can be cancelled, but "
                          f"{name!r} is {state}.")
    except TransitionError as e:  # its driver or the scheduler moved it meanwhile
        raise Refused(str(e)) from None
    return str(service_record(study)["state"])


def check_delete(study: optuna.Study) -> None:
    """Whether `delete` would delete ``study``: no driver may hold it.

    Raises:
        Refused: a driver holds it (trials run, or a service has not ended it); cancel first.
    """

    name = study.study_name
    state = service_record(study)["state"]
    if state == "external" and _running(study):
        raise Refused(f"study {name!r}: trials are running; cancel it first "
                      f"(`moetune cancel {name}`).")
    if state != "external" and state not in ENDED:
        raise Refused(f"delete: only a finished, cancelled, failed or interrupted study can be "
                      f"deleted, but {name!r} is {state}; cancel it first.")


def delete(study: optuna.Study, request: DeleteRequest, *, folder: Path | None,
           stage_folder: Callable[[str], Path | None] = lambda name: None) -> None:
    """Delete ``study`` from its storage, and ``folder`` (its run folder, when its front end
    says it may go; a link is never followed); a law's or ladder's later stages too
    (`owned_stages`), each with the folder ``stage_folder`` gives for its name (None: kept),
    so no budget or rung is left behind for a new law of the same name to find.

    Raises:
        Refused: a driver holds it (`check_delete`); nothing deleted.
    """
    import optuna

    check_delete(study)
    names, stages = owned_stages(study)
    optuna.delete_study(study_name=study.study_name, storage=study._storage)
    for stage in stages:  # the law or ladder ended, so no driver runs its stages
        optuna.delete_study(study_name=stage.study_name, storage=stage._storage)
    for name in names:  # a stage that never ran may have a folder all the same
        _remove(stage_folder(name))
    _remove(folder)


def owned_stages(study: optuna.Study) -> tuple[list[str], list[optuna.Study]]:
    """The names of the later stages (a law's budgets, a ladder's rungs) of the law or ladder
    ``study``, and those of them that exist in its storage and that it made
    (`tuner.study.workflows.stage.check_owned`); none for any other study, or one whose stored
    spec no longer reads."""
    try:
        names = stage_names(st.stored_spec(study))
    except (ValueError, LookupError):
        return [], []
    out = []
    for stage in st.find_studies(names, study._storage).values():
        try:
            check_owned(stage, study.study_name)
        except StageTaken:
            continue  # another's study of that name: not this study's to delete
        out.append(stage)
    return names, out


def _remove(folder: Path | None) -> None:
    if folder is not None and not folder.is_symlink() and folder.is_dir():
        shutil.rmtree(folder)


def _running(study: optuna.Study) -> bool:
    from optuna.trial import TrialState

    return any(t.state == TrialState.RUNNING for t in study.get_trials(deepcopy=False))
