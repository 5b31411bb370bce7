"""The Optuna side of a study: where it is stored, how it is created, found and repaired.

The storage is the truth (see `tuner.records`). This module imports Optuna, never Ray.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sqlite3
import warnings
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy
from optuna.trial import FrozenTrial, TrialState

from tuner import records
from tuner.spec import STORAGE_URL_PREFIXES, StudySpec, spec_from_dict

INTERRUPTED = "interrupted"
DB_FILE = "study.db"
# The URL schemes a study may live in; the same rule as the spec's ``study.storage`` field.
URL_PREFIXES = STORAGE_URL_PREFIXES


class StorageError(ValueError):
    """A storage URL is malformed, unusable or unreachable; the message names where it came
    from (``--storage`` or ``study.storage``), the rule and the URL (password hidden)."""

optuna.logging.set_verbosity(optuna.logging.WARNING)


def storage_url(run_dir: Path, override: str = "", spec: StudySpec | None = None) -> str:
    """``--storage`` beats the spec's ``study.storage``; default: a sqlite file in ``run_dir``."""
    url = override or (spec.study.storage if spec is not None else "")
    return url or f"sqlite:///{(run_dir / DB_FILE).resolve()}"


def check_url(url: str, where: str = "--storage") -> None:
    """Raise `StorageError` unless ``url`` is a database URL moetune can use (before any I/O)."""
    if not url.startswith(URL_PREFIXES):
        raise StorageError(f"{where}: must be a database URL starting with one of "
                           f"{list(URL_PREFIXES)} (e.g. sqlite:////abs/path/study.db, "
                           f"postgresql://user:pw@host/db), but got {_shown(url)!r}.")
    try:
        sqlalchemy.engine.make_url(url)
    except sqlalchemy.exc.ArgumentError as e:
        raise StorageError(f"{where}: not a valid database URL ({e}): {_shown(url)!r}.") from None


def _shown(url: str) -> str:
    """``url`` with its password masked, for messages."""
    try:
        return sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)
    except sqlalchemy.exc.ArgumentError:
        return url


def open_storage(url: str, where: str = "--storage") -> optuna.storages.BaseStorage:
    """An RDB storage for ``url`` (sqlite waits on a lock instead of failing at once).

    Creates the database (a sqlite file, or the tables) if missing; read-only callers use
    `open_existing_storage`. Raises `StorageError` for an unusable or unreachable URL.
    """
    check_url(url, where)
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        kwargs = {"connect_args": {"timeout": 60}}
    try:
        storage = optuna.storages.RDBStorage(_with_installed_driver(url), engine_kwargs=kwargs)
    except (sqlalchemy.exc.SQLAlchemyError, ImportError) as e:
        # e.g. server down, wrong password, driver not installed: say so, not a traceback
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise StorageError(f"{where}: cannot open the database {_shown(url)!r}: "
                           f"{type(e).__name__}: {first}") from None
    if url.startswith("sqlite"):
        _fast_sqlite(storage)
    return storage


def _fast_sqlite(storage: optuna.storages.RDBStorage) -> None:
    """WAL journal + synchronous=NORMAL: a commit survives a killed process (what resume needs)
    and costs no fsync; only a power loss can drop the last commits. ~10x faster per trial."""

    @sqlalchemy.event.listens_for(storage.engine, "connect")
    def _pragmas(dbapi_connection: Any, _record: Any) -> None:
        cur = dbapi_connection.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    storage.engine.dispose()  # reconnect so every pooled connection gets the pragmas


def _with_installed_driver(url: str) -> str:
    """``postgresql://`` means psycopg 3 to SQLAlchemy 2.1; use psycopg2 when only it is here."""
    if not url.startswith("postgresql://"):
        return url
    if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2"):
        return "postgresql+psycopg2://" + url[len("postgresql://"):]
    return url


def open_existing_storage(url: str, where: str = "--storage") -> optuna.storages.BaseStorage:
    """`open_storage` for read-only commands: never creates a sqlite file, and never writes
    Optuna's tables into a database (sqlite or server) that has none. Raises LookupError if
    there is no study database at ``url``."""
    check_url(url, where)
    path = _sqlite_path(url)
    if path is not None:
        if not path.is_file():
            raise LookupError(f"{where}: no database at {path} (nothing was created).")
        if not _has_study_tables(path):
            raise LookupError(f"{where}: {path} is not a moetune study database.")
    elif not _server_has_study_tables(url, where):
        raise LookupError(f"{where}: {_shown(url)} holds no moetune studies (no tables were "
                          "created).")
    return open_storage(url, where)


def _server_has_study_tables(url: str, where: str) -> bool:
    """Whether a database server's database already has Optuna's tables (read-only look)."""
    try:
        engine = sqlalchemy.create_engine(_with_installed_driver(url))
        try:
            return sqlalchemy.inspect(engine).has_table("studies")
        finally:
            engine.dispose()
    except (sqlalchemy.exc.SQLAlchemyError, ImportError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise StorageError(f"{where}: cannot open the database {_shown(url)!r}: "
                           f"{type(e).__name__}: {first}") from None


def _sqlite_path(url: str) -> Path | None:
    if not url.startswith("sqlite:///"):
        return None
    return Path(sqlalchemy.engine.make_url(url).database or "")


def _has_study_tables(path: Path) -> bool:
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True,
                                                timeout=60)) as con:
            rows = con.execute("SELECT name FROM sqlite_master WHERE name = 'studies'")
            return rows.fetchone() is not None
    except sqlite3.DatabaseError:
        return False


def study_names(storage: optuna.storages.BaseStorage) -> list[str]:
    return [s.study_name for s in optuna.get_all_study_summaries(storage)]


def create_study(spec: StudySpec, storage: optuna.storages.BaseStorage,
                 sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    """Create the study; refuses a name that exists (never joins someone else's study)."""
    if spec.name in study_names(storage):
        raise FileExistsError(f"study {spec.name!r} already exists in this storage; "
                              "use `moetune resume` (or submit --resume) to continue it.")
    study = optuna.create_study(study_name=spec.name, storage=storage, sampler=sampler,
                                directions=[d for _, d in spec.objectives])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names([n for n, _ in spec.objectives])
    study.set_user_attr(records.SPEC, spec.to_dict())
    study.set_user_attr(records.OBJECTIVES, [list(o) for o in spec.objectives])
    study.set_user_attr(records.CONSTRAINTS, dict(spec.constraints))
    return study


def load_study(name: str, storage: optuna.storages.BaseStorage,
               sampler: optuna.samplers.BaseSampler | None = None) -> optuna.Study:
    if name not in study_names(storage):
        raise LookupError(f"no study named {name!r} in this storage; known: "
                          f"{sorted(study_names(storage))}.")
    return optuna.load_study(study_name=name, storage=storage, sampler=sampler)


def stored_spec(study: optuna.Study) -> StudySpec:
    """The spec the study was submitted with (space inline, so no file is needed)."""
    return spec_from_dict(study.user_attrs[records.SPEC])


class ResumeSpecError(ValueError):
    """A spec given on resume changes what the stored study's trials mean."""


# Fields a resume may change: how many trials and how they are placed, not what they measure.
RESUMABLE_CHANGES = frozenset({"study.n_trials", "study.max_concurrent",
                               "resources.cpus_per_trial", "resources.gpus_per_trial"})


def check_resume_spec(stored: StudySpec, new: StudySpec) -> None:
    """Raise `ResumeSpecError` unless ``new`` only makes changes `RESUMABLE_CHANGES` allows.

    Everything else (objectives, constraints, space, budget, model, data, sampler, seed, …)
    decides what a trial measures or what is proposed next, so trials run under the old and
    the new value could not be compared in one study.
    """
    old, now = _flat(stored.to_dict()), _flat(new.to_dict())
    changed = sorted(k for k in old.keys() | now.keys() if old.get(k) != now.get(k))
    bad = [k for k in changed if k not in RESUMABLE_CHANGES]
    if new.study.n_trials < stored.study.n_trials:
        bad.append("study.n_trials")
    if bad:
        diffs = "; ".join(f"{k}: stored {_value(old, k)}, new {_value(now, k)}" for k in bad)
        raise ResumeSpecError(
            f"study {stored.name!r}: the spec differs from the one the study was submitted "
            f"with in {diffs}. On resume only {sorted(RESUMABLE_CHANGES)} may change "
            "(n_trials only upwards); submit under a new --name to change the rest.")


def _value(flat: dict[str, Any], key: str) -> str:
    return repr(flat[key]) if key in flat else "(unset)"


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):  # an empty table adds no key: {} and absent are the same
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def update_stored_spec(study: optuna.Study, spec: StudySpec) -> None:
    """Record ``spec`` (checked by `check_resume_spec`) as the study's spec, so status and a
    later resume use its n_trials."""
    study.set_user_attr(records.SPEC, spec.to_dict())


def is_interrupted(t: FrozenTrial) -> bool:
    return t.state == TrialState.FAIL and t.user_attrs.get(records.REASON) == INTERRUPTED


def counts_toward_target(t: FrozenTrial) -> bool:
    """COMPLETE, PRUNED and real failures count toward n_trials; interrupted ones are re-run."""
    if t.state in (TrialState.COMPLETE, TrialState.PRUNED):
        return True
    return t.state == TrialState.FAIL and not is_interrupted(t)


def n_done(study: optuna.Study) -> int:
    return sum(counts_toward_target(t) for t in study.get_trials(deepcopy=False))


def reap_interrupted(study: optuna.Study, storage: optuna.storages.BaseStorage) -> list[int]:
    """Mark every RUNNING trial FAIL ("interrupted") and queue its params to be re-run.

    Only call this when no driver is running the study: with ask/tell there is no heartbeat,
    so a RUNNING trial after a driver died stays RUNNING forever unless reaped here.
    """
    reaped = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        storage.set_trial_user_attr(t._trial_id, records.OUTCOME, "fail")
        storage.set_trial_user_attr(t._trial_id, records.REASON, INTERRUPTED)
        study.tell(t.number, state=TrialState.FAIL)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            study.enqueue_trial(t.params, user_attrs={records.RERUN_OF: t.number})
        reaped.append(t.number)
    return reaped
