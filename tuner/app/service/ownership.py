"""Whose a study is and which run folders the service made: who may change a study (its owner
or an admin; an attached one only by its `serve --attach` owner, and only cancelled), the run
folders made and marked at submit (`attached.MARKER` names their study), the only ones delete
removes, and what a user holds against their quotas."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import optuna
from fastapi import HTTPException

from tuner.app.requests.studies import record_of, service_record
from tuner.app.service.access.auth import may_change
from tuner.app.service.access.quotas import Held, folder_bytes
from tuner.app.service.access.tokens import User
from tuner.app.service.running.attached import MARKER


def check_owned(study: optuna.Study, user: User, action: str,
                attach_owners: Mapping[str, str]) -> str:
    """The study's state when ``user`` may ``action`` it: they own it or are an admin; a study
    from the command line (state ``external``) only when `serve --attach` gave it an owner and
    the action is a cancel.

    Raises:
        HTTPException: 409 for a study this service does not run, 403 for another's study.
    """
    rec = service_record(study)
    if rec["state"] == "external":
        owner = attach_owners.get(study.study_name)
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


@contextlib.contextmanager
def marked_folders(root: Path, names: Sequence[str], study: str) -> Iterator[None]:
    """Make ``ROOT/<name>`` for each of ``names``, each marked as made for ``study``; if the
    block raises, every folder marked so far is removed: nothing is left of a failed submit."""
    folders = [root / n for n in names]
    try:
        for made in folders:
            made.mkdir(parents=True)
            (made / MARKER).write_text(f"{study}\n")
        yield
    except BaseException:
        for made in folders:
            if (made / MARKER).is_file():
                shutil.rmtree(made, ignore_errors=True)
        raise


def made_here(root: Path, folder_name: str, study: str) -> Path | None:
    """``ROOT/folder_name`` when this service made it at submit for ``study`` (its mark names
    ``study``), else None: delete removes no other folder."""
    folder = root / folder_name
    mark = folder / MARKER
    made = (not folder.is_symlink() and folder.is_dir() and mark.is_file()
            and folder.resolve().parent == root.resolve()
            and mark.read_text().strip() == study)
    return folder if made else None


def held(storage: optuna.storages.BaseStorage, root: Path, user: str) -> Held:
    """What ``user`` holds against their quotas: the studies the service keeps for them (a
    law's or ladder's stages are its own, not counted apart) and the bytes of the run folders
    it made for those studies (each folder's mark names its study)."""
    mine = {frozen.study_name for frozen in storage.get_all_studies()
            if record_of(frozen.user_attrs).get("owner") == user}
    folders = []
    for folder in root.iterdir() if root.is_dir() else ():
        mark = folder / MARKER
        if not folder.is_symlink() and mark.is_file() and mark.read_text().strip() in mine:
            folders.append(folder)
    return Held(studies=len(mine), disk_bytes=folder_bytes(folders))
