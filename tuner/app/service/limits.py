"""What a user may still run on the service, judged at submit and at resume: the operator's caps
on a spec (`access.caps`) and the user's quotas (`access.quotas`), against what the user holds
(`ownership.held`)."""

from __future__ import annotations

import optuna
from fastapi import HTTPException

from tuner.app.service.access.caps import CapExceeded, check_caps, check_resume_cap
from tuner.app.service.access.quotas import Held, QuotaExceeded, check_disk, check_submit
from tuner.app.service.access.tokens import User
from tuner.app.service.config import ServiceConfig
from tuner.app.service.submit_checks import SubmitError
from tuner.study.specs.spec import StudySpec
from tuner.study.store import storage as st
from tuner.study.workflows.stage_runner import stage_names


def check_submit_caps(spec: StudySpec, config: ServiceConfig) -> None:
    """The operator's caps (`caps.check_caps`: every training counted; 0 is none)."""
    try:
        check_caps(spec, config.caps())
    except CapExceeded as e:
        raise SubmitError(str(e), field=e.field) from None


def check_submit_quota(spec: StudySpec, config: ServiceConfig, user: User, held: Held) -> None:
    """``user``'s quotas on one more study (`quotas.check_submit`; 429 or 507)."""
    try:
        check_submit(config.quotas.of(user.name, admin=user.admin), user.name, held,
                     spec.study.max_concurrent)
    except QuotaExceeded as e:
        raise SubmitError(str(e), field=e.field, status=e.status) from None


def check_resume_disk(config: ServiceConfig, owner: str, user: User, held: Held) -> None:
    """The study's owner's run folders below their disk quota (a 507); an admin resuming is
    not limited."""
    try:
        check_disk(config.quotas.of(owner, admin=user.admin), owner, held)
    except QuotaExceeded as e:
        raise HTTPException(e.status, str(e)) from None


def check_resume_caps(study: optuna.Study, config: ServiceConfig,
                      storage: optuna.storages.BaseStorage) -> None:
    """``--max-trials`` on a resume: the trainings the study and its stages made, interrupted
    ones included, and those the resume can still run (`caps.check_resume_cap`; a 429)."""
    spec = st.stored_spec(study)
    stages = st.find_studies(stage_names(spec), storage, loaded={study.study_name: study})
    try:
        check_resume_cap(spec, [study, *stages.values()], config.caps())
    except CapExceeded as e:
        raise HTTPException(429, str(e)) from None
