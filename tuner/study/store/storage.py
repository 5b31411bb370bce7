"""A moetune study in its database: created, found, its stored spec, and its schema version.

The storage is the truth (see `tuner.study.store.records`). A study records the schema version it
was written with; `load_study` refuses one from a newer moetune, readers decode every older
schema's records as they are, and `migrate` (run by a driver about to write) records the current
version. Imports Optuna, never Ray.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping

import optuna

from tuner.study.specs.ladder_spec import RUNG_SEP
from tuner.study.specs.law_spec import base_name
from tuner.study.specs.spec import StudySpec, parse_spec
from tuner.study.store import records
from tuner.study.store.database import open_existing_storage, study_names


class SchemaError(ValueError):
    """The study was written by a newer moetune whose records this version cannot read."""


class IncompleteStudy(ValueError):
    """The study's driver died while creating it: Optuna's study exists, its spec does not."""


def create_study(spec: StudySpec, storage: optuna.storages.BaseStorage,
                 sampler: optuna.samplers.BaseSampler | None = None) -> optuna.Study:
    """Create the study; refuses a name that exists (never joins someone else's study).
    ``sampler``: the one its trials are asked from in this process (none: Optuna's default,
    for a study created to be run elsewhere, as the service's queue does)."""
    if spec.name in study_names(storage):
        raise FileExistsError(f"study {spec.name!r} already exists in this storage; "
                              "use `moetune resume` (or submit --resume) to continue it.")
    study = optuna.create_study(study_name=spec.name, storage=storage, sampler=sampler,
                                directions=[d for _, d in spec.objectives])
    finish_creation(study, spec)
    return study


def stage_base(spec: StudySpec) -> str:
    """The law or ladder a stage study belongs to (its budget 0 or bottom rung), else itself."""
    if spec.law.on:
        return base_name(spec.name, spec.law)
    if spec.ladder.on and spec.ladder.rung:
        return spec.name.rsplit(RUNG_SEP, 1)[0]
    return spec.name


def is_complete(study: optuna.Study) -> bool:
    """Whether the study got its moetune attributes (Optuna creates a study and its attributes
    in separate commits, and a driver may die in between)."""
    return records.SPEC in study.user_attrs


def finish_creation(study: optuna.Study, spec: StudySpec) -> None:
    """Record the study's moetune attributes: its spec, objectives, constraints, schema; and,
    for a law's budget or a ladder's rung above the first, the law or ladder it is a stage of
    (`records.STAGE_OF`, written before the spec, so a complete study always has it)."""
    base = stage_base(spec)
    if base != spec.name:
        study.set_user_attr(records.STAGE_OF, base)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names([n for n, _ in spec.objectives])
    study.set_user_attr(records.SCHEMA, records.SCHEMA_VERSION)
    study.set_user_attr(records.SPEC, spec.to_dict())
    study.set_user_attr(records.OBJECTIVES, [list(o) for o in spec.objectives])
    study.set_user_attr(records.CONSTRAINTS, dict(spec.constraints))


def find_study(name: str, storage: optuna.storages.BaseStorage) -> optuna.Study | None:
    """The study ``name`` if ``storage`` holds it, else None (the one "find a study by name").

    Raises:
        SchemaError: written by a newer moetune.
    """
    return find_studies([name], storage).get(name)


def find_studies(names: Iterable[str], storage: optuna.storages.BaseStorage, *,
                 loaded: Mapping[str, optuna.Study] | None = None) -> dict[str, optuna.Study]:
    """``{name: study}`` for each of ``names`` that ``storage`` holds, in their order, the
    storage's names listed once (a law's budgets, a ladder's rungs); a study in ``loaded`` (by
    name) is taken from it, not loaded again.

    Raises:
        SchemaError: one written by a newer moetune.
    """
    held, loaded = set(study_names(storage)), loaded or {}
    return {name: loaded[name] if name in loaded else load_study(name, storage)
            for name in names if name in held}


def storage_if_exists(url: str) -> optuna.storages.RDBStorage | None:
    """The storage at ``url``, None when there is no database there; creates nothing (looking
    leaves no file behind)."""
    try:
        return open_existing_storage(url)
    except LookupError:
        return None


def find_study_at(url: str, name: str) -> optuna.Study | None:
    """The study ``name`` in the storage at ``url``, None when there is no database there or
    it does not hold that study; creates nothing."""
    storage = storage_if_exists(url)
    return find_study(name, storage) if storage is not None else None


def load_study(name: str, storage: optuna.storages.BaseStorage,
               sampler: optuna.samplers.BaseSampler | None = None) -> optuna.Study:
    """The study ``name``.

    Raises:
        LookupError: no such study. SchemaError: written by a newer moetune.
    """
    if name not in study_names(storage):
        raise LookupError(f"no study named {name!r} in this storage; known: "
                          f"{sorted(study_names(storage))}.")
    study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
    version = schema_version(study)
    if version > records.SCHEMA_VERSION:
        raise SchemaError(f"study {name!r} was written with record schema {version}, newer than "
                          f"this moetune's {records.SCHEMA_VERSION}; upgrade moetune "
                          "(pip install -U moetune) to read or resume it.")
    return study


def schema_version(study: optuna.Study) -> int:
    """The record schema the study was written with (1: before versions were recorded)."""
    return int(study.user_attrs.get(records.SCHEMA, 1))


def migrate(study: optuna.Study) -> int:
    """Bring a study written with an older schema up to `records.SCHEMA_VERSION`; returns the
    version it had. Only a driver that is about to write to the study calls this.

    A finished trial's attributes cannot change (Optuna refuses), so a step never rewrites old
    trials: the reader decodes each schema's records (`tuner.study.results.trial_record`), and a
    migration records the new version so the trials written from now on follow it.

    1 → 2: trials gain typed REASONS; a schema-1 trial's REASON text is parsed on read
    (`tuner.study.results.reasons.parse_reason_text`).
    """
    version = schema_version(study)
    if version < records.SCHEMA_VERSION:
        study.set_user_attr(records.SCHEMA, records.SCHEMA_VERSION)
    return version


def stored_spec(study: optuna.Study) -> StudySpec:
    """The spec the study was submitted with (space inline, so no file is needed). Parsed
    only: the corpus and model files are checked by the command that uses them
    (`tuner.study.specs.spec.check_inputs`), once.

    Raises:
        IncompleteStudy: the study has no stored spec (its creating driver died).
    """
    if not is_complete(study):
        raise IncompleteStudy(
            f"study {study.study_name!r} has no stored spec: the driver creating it stopped "
            "before recording it. `moetune submit SPEC --resume` with its spec file finishes "
            "creating it and runs it.")
    return parse_spec(study.user_attrs[records.SPEC])


def update_stored_spec(study: optuna.Study, spec: StudySpec) -> None:
    """Record ``spec`` (checked by `check_resume_spec`) as the study's spec, so status and a
    later resume use its n_trials."""
    study.set_user_attr(records.SPEC, spec.to_dict())
