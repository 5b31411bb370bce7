"""The stored study: a schema version, inputs checked once, older studies migrated, newer ones
refused clearly."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

import trainers.data
from tuner.app.cli import main
from tuner.study.results.trial_record import trial_records
from tuner.study.specs.spec import load_spec
from tuner.study.store import database as db
from tuner.study.store import records
from tuner.study.store import storage as st
from tuner.study.trial.samplers import make_sampler

SPEC = """
[study]
name = "sch"
n_trials = {n}
max_concurrent = 1
sampler = "random"
[data]
corpus = "corpus.txt"
[budget]
tokens_per_trial = 300
eval_every_tokens = 100
[pruning]
scheduler = "none"
[space.params.lr]
type = "float"
low = 1e-4
high = 1e-2
log = true
"""
QT = ["--trainer", "tuner.testing:quick_train", "--no-progress"]


@pytest.fixture
def corpus_loads(monkeypatch):
    """How many times the driver process reads and hashes a text corpus."""
    calls: list[str] = []
    real = trainers.data._mapped_bytes

    def counting(path, *, name: str, digest: str | None):
        calls.append(name)
        return real(path, name=name, digest=digest)

    monkeypatch.setattr(trainers.data, "_mapped_bytes", counting)
    return calls


def stored(tmp_path, n=2) -> optuna.Study:
    """A study with ``n`` finished trials written through the storage API (no Ray)."""
    (tmp_path / "corpus.txt").write_text("the quick brown fox jumps over the lazy dog\n" * 400)
    (tmp_path / "sch.toml").write_text(SPEC.format(n=n))
    spec = load_spec(tmp_path / "sch.toml")
    run_dir = tmp_path / "runs" / "sch"
    run_dir.mkdir(parents=True)
    study = st.create_study(spec, db.open_storage(db.storage_url(run_dir)), make_sampler(spec))
    for i in range(n):
        t = study.ask()
        spec.space.suggest(t)
        t.set_user_attr(records.OUTCOME, "fail")
        t.set_user_attr(records.REASON, f"constraint max_vio: {i}.5 violates <= 0.1"
                        if i else "Traceback (most recent call last):\nValueError: bad lr")
        study.tell(t, state=TrialState.FAIL)
    return study


def test_a_new_study_records_the_schema_version(tmp_path):
    study = stored(tmp_path)
    assert study.user_attrs[records.SCHEMA] == records.SCHEMA_VERSION == st.schema_version(study)


def test_resume_checks_the_corpus_once(ray_session, tmp_path, corpus_loads):
    study = stored(tmp_path, n=2)
    study.set_user_attr(records.SPEC, {**study.user_attrs[records.SPEC],
                                       "study": {**study.user_attrs[records.SPEC]["study"],
                                                 "n_trials": 3}})
    corpus_loads.clear()
    assert main(["resume", "sch", "--root", str(tmp_path / "runs"), *QT]) == 0
    assert len(corpus_loads) == 1  # check_inputs; the stored spec itself is only parsed


def test_rerun_reads_the_corpus_once(tmp_path, corpus_loads, capsys):
    study = stored(tmp_path, n=1)
    t = study.ask()
    study.tell(t, state=TrialState.FAIL)
    # a trial that trained: give it a recipe and model, as the searcher does
    from trainers import Recipe, preset
    trial = optuna.create_trial(state=TrialState.COMPLETE, values=[3.0], params={"lr": 1e-3},
                                distributions={"lr": optuna.distributions.FloatDistribution(
                                    1e-4, 1e-2, log=True)},
                                user_attrs={records.RECIPE: Recipe(seq_len=32).to_dict(),
                                            records.MODEL_ARGS: preset("debug").to_dict(),
                                            records.OUTCOME: "complete"})
    study.add_trial(trial)
    corpus_loads.clear()
    rc = main(["rerun", "sch", "2", "--root", str(tmp_path / "runs")])
    assert rc == 0, capsys.readouterr().err
    assert len(corpus_loads) == 1


def test_a_schema_1_study_reads_and_migrates(tmp_path):
    study = stored(tmp_path)
    study.set_user_attr(records.SCHEMA, 1)  # as written before versions were recorded
    recs = trial_records(study)  # readers decode schema-1 reasons without writing
    assert [r.reasons[0].kind for r in recs] == ["exception", "constraint"]
    assert recs[1].reasons[0].subject == "max_vio"
    assert records.REASONS not in study.trials[0].user_attrs
    assert st.migrate(study) == 1
    assert st.schema_version(study) == records.SCHEMA_VERSION
    assert trial_records(study) == recs  # old trials still read the same after the upgrade


def test_a_study_from_a_newer_moetune_is_refused_clearly(tmp_path, capsys):
    study = stored(tmp_path)
    study.set_user_attr(records.SCHEMA, records.SCHEMA_VERSION + 1)
    assert main(["status", "sch", "--root", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert f"record schema {records.SCHEMA_VERSION + 1}" in err and "upgrade moetune" in err
