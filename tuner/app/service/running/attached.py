"""Studies run from the command line under the service's root, shown beside its own, read-only.

``moetune submit --root ROOT`` keeps a study in its own sqlite file, ``ROOT/<name>/study.db``
(a ladder's rungs and a law's budgets in the same file). A service started on that root lists
every such study with the ones in its own storage: the list, the study page, the report and the
export read it. Nothing is written into it: its state is ``external``, from which
`studies.TRANSITIONS` allows no move (so no cancel, resume or delete), and its report is built
under the service's own folder (`REPORTS`), not into the command line's run folder.

A folder is looked at when its name is a study name, it is no symlink, the service did not make
it (no `MARKER`), and it holds a ``study.db`` with moetune's tables; the scan is repeated at most
every `MAX_AGE_S` seconds, so the list page polling every 2 s costs a folder listing now and
then, not a database open per request.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import optuna

from tuner.study.specs.spec import NAME_RE
from tuner.study.store import database as db

MARKER = ".moetune-service"  # in a run folder the service made (its studies are in its storage)
REPORTS = ".attached-reports"  # ROOT/REPORTS/<name>/: reports of attached studies
MAX_AGE_S = 5.0


class Attached:
    """The command-line studies under ``root``: ``{name: its storage}``."""

    def __init__(self, root: Path, *, max_age_s: float = MAX_AGE_S) -> None:
        self._root = root
        self._max_age_s = max_age_s
        self._lock = threading.Lock()
        self._at = -float("inf")
        self._by_name: dict[str, tuple[str, optuna.storages.RDBStorage]] = {}
        self._stores: dict[Path, optuna.storages.RDBStorage] = {}

    def names(self) -> list[str]:
        return sorted(self._scan())

    def storage(self, name: str) -> tuple[str, optuna.storages.RDBStorage] | None:
        """(URL, storage) of the attached study ``name``, None if there is none."""
        return self._scan().get(name)

    def report_dir(self, name: str) -> Path:
        return self._root / REPORTS / name

    def _scan(self) -> dict[str, tuple[str, optuna.storages.RDBStorage]]:
        with self._lock:
            if time.monotonic() - self._at < self._max_age_s:
                return self._by_name
            found: dict[str, tuple[str, optuna.storages.RDBStorage]] = {}
            for folder in sorted(self._root.iterdir()) if self._root.is_dir() else []:
                path = folder / db.DB_FILE
                if (not NAME_RE.fullmatch(folder.name) or folder.is_symlink()
                        or not folder.is_dir() or (folder / MARKER).exists()
                        or path.is_symlink() or not path.is_file()):
                    continue
                url = f"sqlite:///{path.resolve()}"
                try:
                    store = self._stores.get(path) or db.open_existing_storage(url)
                    names = db.study_names(store)
                except Exception:  # noqa: BLE001 - unreadable, or no study database: not listed
                    continue
                self._stores[path] = store
                for name in names:
                    if NAME_RE.fullmatch(name):
                        found.setdefault(name, (url, store))
            self._by_name, self._at = found, time.monotonic()
            return found
