"""The same service against a real PostgreSQL server (`.ci/run` starts one on loopback)."""

from __future__ import annotations

import os
import uuid

import optuna
import pytest
from optuna.trial import TrialState

from tuner import testing
from tuner.app.cli import main
from tuner.study.run.runner import run_study
from tuner.study.specs.spec import spec_from_dict
from tuner.study.store import database as db
from tuner.study.store import records
from tuner.study.store.database import open_storage

URL = os.environ.get("MOETUNE_TEST_POSTGRES",
                     "postgresql://moetune:moetune@127.0.0.1:5432/moetune_test")


@pytest.fixture(scope="module")
def postgres_url() -> str:
    try:
        import psycopg2
    except ImportError:
        pytest.skip("psycopg2 is not installed (pip install psycopg2-binary)")
    try:
        psycopg2.connect(URL, connect_timeout=3).close()
    except psycopg2.OperationalError as e:
        pytest.skip(f"no PostgreSQL server at {URL} (.ci/run starts one; set "
                    f"MOETUNE_TEST_POSTGRES to point elsewhere): {str(e).strip()[:200]}")
    return URL


def test_study_runs_and_resumes_against_postgresql(postgres_url, ray_session, tmp_path,
                                                   capsys):
    name = f"pg-{uuid.uuid4().hex[:8]}"
    spec = spec_from_dict({
        "study": {"name": name, "n_trials": 3, "max_concurrent": 2},
        "budget": {"tokens_per_trial": 300, "eval_every_tokens": 100},
        "constraints": {"max_peak_memory_gb": 4.0},
        "pruning": {"scheduler": "none"},
        "space": {"params": {"lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}}},
    })
    try:
        summary = run_study(spec, run_dir=tmp_path / name, storage=postgres_url,
                            trainer=testing.quick_train, progress=False)
        # the summary (printed by submit) shows the URL with its password masked
        assert summary.storage == db.shown(postgres_url) and summary.done == 3
        assert not (tmp_path / name / "study.db").exists()  # nothing went to sqlite
        study = optuna.load_study(study_name=name, storage=open_storage(postgres_url))
        assert study.user_attrs[records.SPEC] == spec.to_dict()
        for t in study.trials:
            assert t.state == TrialState.COMPLETE
            assert t.user_attrs[records.OUTCOME] == "complete"
            assert t.constraints[records.DIVERGED] == -1.0
        # A dead driver's trial is reaped and re-run on the shared database too.
        dead = study.ask()
        dead.suggest_float("lr", 1e-4, 1e-2, log=True)
        spec2 = spec_from_dict({**spec.to_dict(), "study": {**spec.to_dict()["study"],
                                                             "n_trials": 4}})
        summary = run_study(spec2, run_dir=tmp_path / name, storage=postgres_url, resume=True,
                            trainer=testing.quick_train, progress=False)
        assert summary.reaped == (dead.number,) and summary.done == 4
        assert main(["status", name, "--storage", postgres_url]) == 0
        assert capsys.readouterr().out.count("complete") == 4
    finally:
        optuna.delete_study(study_name=name, storage=open_storage(postgres_url))


def test_read_only_commands_create_no_tables_in_an_empty_database(postgres_url, capsys):
    """`moetune list/status --storage` on a database with no studies says so and leaves it as
    it was (Optuna would create its tables on connect). An empty schema stands in for an
    empty database: the test role may not create databases."""
    import psycopg2

    schema = f"empty_{uuid.uuid4().hex[:8]}"
    with psycopg2.connect(postgres_url) as con, con.cursor() as cur:
        cur.execute(f"CREATE SCHEMA {schema}")
    url = f"{postgres_url}?options=-csearch_path%3D{schema}"
    try:
        for argv in (["list"], ["status", "nope"]):
            assert main([*argv, "--storage", url]) == 2
            assert "holds no moetune studies (no tables were created)" in \
                capsys.readouterr().err
        with psycopg2.connect(postgres_url) as con, con.cursor() as cur:
            cur.execute("SELECT count(*) FROM information_schema.tables "
                        "WHERE table_schema = %s", (schema,))
            assert cur.fetchone()[0] == 0
    finally:
        with psycopg2.connect(postgres_url) as con, con.cursor() as cur:
            cur.execute(f"DROP SCHEMA {schema} CASCADE")
