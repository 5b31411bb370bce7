"""A service study's state machine, and the scheduler through a storage outage, without a
server: the moves written once in `studies.TRANSITIONS`, a move they do not allow refused, and a
study whose driver ended while the storage was down marked failed (not stuck, no slot held)
once the storage answers, then resumable."""

from __future__ import annotations

import time

import optuna
import pytest
import sqlalchemy.exc

from tuner.app.requests.studies import (
    ACTIVE,
    ENDED,
    STATES,
    STORAGE_UNREACHABLE,
    TRANSITIONS,
    TransitionError,
    enqueue,
    service_record,
    set_state,
)
from tuner.app.service.running import scheduler as sched
from tuner.app.service.running.faults import storage_down


def new_study(name: str = "s") -> optuna.Study:
    study = optuna.create_study(study_name=name, storage=optuna.storages.InMemoryStorage())
    enqueue(study, "alice")
    return study


def test_the_transitions_cover_every_state_and_end_nowhere_odd():
    assert set(TRANSITIONS) == set(STATES)
    assert all(set(to) <= set(STATES) for to in TRANSITIONS.values())
    assert TRANSITIONS["finished"] == ()
    for state in ENDED:  # an ended study is only ever queued again (resume)
        assert set(TRANSITIONS[state]) <= {"queued"}
    for state in ACTIVE:  # an active study can always end as failed (its driver's error)
        assert "failed" in TRANSITIONS[state]


def test_a_move_the_machine_does_not_allow_is_refused_and_changes_nothing():
    study = new_study()
    set_state(study, "starting")
    set_state(study, "running")
    set_state(study, "finished", error="")
    before = service_record(study)
    for state in ("running", "queued", "failed", "cancelled"):
        with pytest.raises(TransitionError, match="may not move from finished"):
            set_state(study, state)
    assert service_record(study) == before


def test_a_study_run_from_the_command_line_is_never_moved():
    study = optuna.create_study(study_name="cli", storage=optuna.storages.InMemoryStorage())
    with pytest.raises(TransitionError, match="from external"):
        set_state(study, "queued")


def test_finishing_clears_a_stale_error():
    study = new_study()
    set_state(study, "starting")
    set_state(study, "running")
    set_state(study, "queued", error="its driver was lost; queued again")
    set_state(study, "starting")
    set_state(study, "running")
    set_state(study, "finished")
    assert service_record(study)["error"] == ""


def test_a_storage_error_is_told_through_its_causes():
    down = sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("connection refused"))
    try:
        try:
            raise down
        except sqlalchemy.exc.OperationalError as e:
            raise RuntimeError("the Tune loop ended") from e
    except RuntimeError as wrapped:
        assert storage_down(wrapped)
    assert not storage_down(ValueError("lr: must be > 0"))


def test_a_driver_lost_in_an_outage_leaves_its_study_failed_then_resumable(monkeypatch, tmp_path):
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'db.sqlite'}")
    study = optuna.create_study(study_name="s", storage=storage)
    enqueue(study, "alice")
    set_state(study, "starting")
    set_state(study, "running")
    outage = {"left": 3}
    real_listing = storage.get_all_studies

    def listing():  # the storage down for three passes (each begins with the listing), then back
        if outage["left"]:
            outage["left"] -= 1
            raise sqlalchemy.exc.OperationalError("SELECT", {}, Exception("server closed"))
        return real_listing()

    monkeypatch.setattr(storage, "get_all_studies", listing)
    monkeypatch.setattr(sched.driver, "is_running", lambda name: False)  # it ended on the error
    started = []
    monkeypatch.setattr(sched.driver, "start", lambda name, **kw: started.append(name))
    s = sched.Scheduler(storage=storage, storage_url="", root=tmp_path, trainer="",
                        max_running=1, interval_s=0.02)
    s.start()
    try:
        deadline = time.monotonic() + 10
        while service_record(study)["state"] != "failed" and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        s.stop()
    rec = service_record(study)
    assert rec["state"] == "failed" and rec["error"].startswith(STORAGE_UNREACHABLE)
    assert outage["left"] == 0 and started == []  # not queued again behind the owner's back
    set_state(study, "queued", error="")  # what resume does
    assert service_record(study)["state"] == "queued"


def test_without_an_outage_a_lost_driver_is_queued_again(tmp_path):
    study = new_study()
    set_state(study, "starting")
    set_state(study, "running")
    sched._driver_lost(study)
    assert service_record(study)["state"] == "queued"
