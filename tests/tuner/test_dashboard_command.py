"""`moetune dashboard`: plain optuna-dashboard's API on a moetune study shows the infeasible
trial as infeasible and the learning curve, from the stored trials as the runner writes them."""

from __future__ import annotations

import io
import json

import optuna
import pytest

from tuner.app.dashboard_command import dashboard_app
from tuner.study.store import database as db


def _get(app, path: str) -> dict:
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": "",
               "SERVER_NAME": "x", "SERVER_PORT": "80", "wsgi.input": io.BytesIO(),
               "wsgi.errors": io.StringIO(), "wsgi.url_scheme": "http"}
    status = []
    body = b"".join(app(environ, lambda s, h, *a: status.append(s)))
    assert status[0].startswith("200"), status
    return json.loads(body)


def _study(tmp_path) -> optuna.Study:
    storage = db.open_storage(f"sqlite:///{tmp_path / 'study.db'}")
    study = optuna.create_study(study_name="dash", storage=storage,
                                directions=["minimize", "minimize"])
    for loss, memory in ((2.5, -1.0), (2.4, 3.0)):  # the second breaks its memory limit
        t = study.ask()
        t.suggest_float("lr", 1e-4, 1e-2, log=True)
        t.set_constraint("max_peak_memory_gb", memory)
        for step, v in ((100, loss + 1), (200, loss)):  # as the searcher writes them
            t.storage.set_trial_intermediate_value(t._trial_id, step, v)
        study.tell(t, [loss, 1.0])
    return study


def test_the_dashboard_shows_constraints_and_curves_of_a_study(tmp_path):
    pytest.importorskip("optuna_dashboard")
    study = _study(tmp_path)
    app = dashboard_app(study)
    detail = _get(app, f"/api/studies/{study._study_id}")
    trials = sorted(detail["trials"], key=lambda t: t["number"])
    assert [t["constraints"] for t in trials] == [[-1.0], [3.0]]  # infeasible: > 0
    assert [[v["step"] for v in t["intermediate_values"]] for t in trials] == [[100, 200]] * 2
    assert study.trials[1].constraints == {"max_peak_memory_gb": 3.0}  # the stored trial as is


def test_the_plain_storage_shows_no_constraints_which_is_why_the_view_exists(tmp_path):
    optuna_dashboard = pytest.importorskip("optuna_dashboard")
    study = _study(tmp_path)
    detail = _get(optuna_dashboard.wsgi(study._storage), f"/api/studies/{study._study_id}")
    assert all(t["constraints"] == [] for t in detail["trials"])
