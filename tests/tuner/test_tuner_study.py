"""Studies run through Ray Tune with fake trainers: outcomes, storage contents, resume, seeds."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.utils.specs import minimal_spec
from trainers import ModelArgs, Recipe
from tuner import testing
from tuner.study.run import resume as rs
from tuner.study.run.runner import run_study
from tuner.study.store import database as db
from tuner.study.store import records
from tuner.study.store import storage as st
from tuner.study.trial.samplers import make_sampler

SPACE = {"params": {
    "lr": {"type": "float", "low": 1e-4, "high": 3e-2, "log": True},
    "warmup_fraction": {"type": "float", "low": 0.0, "high": 0.2},
    "decay": {"type": "categorical", "choices": ["cosine", "wsd"]},
    "decay_fraction": {"type": "float", "low": 0.1, "high": 0.3, "when": {"decay": ["wsd"]}},
}}
MEM = {"max_peak_memory_gb": 4.0}


def make_spec(name: str, *, n: int = 4, conc: int = 2, scheduler: str = "none",
              constraints: dict | None = None, sampler: str = "tpe", seed: int = 0):
    return minimal_spec(
        name, study={"n_trials": n, "max_concurrent": conc, "sampler": sampler, "seed": seed},
        objectives={"val_loss": "minimize", "tokens_per_s": "maximize"},
        constraints=constraints or {}, space=SPACE,
        pruning={"scheduler": scheduler, "grace_tokens": 100, "reduction_factor": 2})


def run(run_dir: Path, spec, trainer=testing.quick_train, **kw) -> optuna.Study:
    summary = run_study(spec, run_dir=run_dir / spec.name, trainer=trainer, progress=False,
                        **kw)
    return optuna.load_study(study_name=spec.name, storage=summary.storage)


@pytest.fixture(scope="module")
def ok_study(ray_session, tmp_path_factory):
    root = tmp_path_factory.mktemp("ok")
    spec = make_spec("ok", n=5, constraints=MEM)
    return root, spec, run(root, spec)


def test_complete_trials_store_everything_needed_to_rerun(ok_study):
    _, spec, study = ok_study
    assert study.user_attrs[records.SPEC] == spec.to_dict()
    assert study.user_attrs[records.OBJECTIVES] == [["val_loss", "minimize"],
                                                    ["tokens_per_s", "maximize"]]
    assert study.user_attrs[records.CONSTRAINTS] == MEM
    assert study.metric_names == ["val_loss", "tokens_per_s"]
    for t in study.get_trials():
        a = t.user_attrs
        recipe = Recipe.from_dict(a[records.RECIPE])
        assert ModelArgs.from_dict(a[records.MODEL_ARGS]).dim > 0
        assert recipe.lr == t.params["lr"] and recipe.seed == spec.study.seed
        assert a[records.OUTCOME] == "complete" and a[records.REASON] == ""
        assert t.values[0] == pytest.approx(testing.loss_of(recipe))
        assert a[records.METRICS]["val_loss"] == pytest.approx(t.values[0])
        assert "eval_curve" not in a[records.METRICS]
        assert [p[0] for p in a[records.EVAL_CURVE]] == [100, 200, 300]
        # the same curve as Optuna intermediate values (a two-objective study: Trial.report
        # would refuse), which optuna-dashboard draws
        assert t.intermediate_values == {s: pytest.approx(v) for s, v in a[records.EVAL_CURVE]}
        assert len(a[records.TRAIN_CURVE]) == 5
        assert a[records.SEED] == 0 and a[records.CORPUS_HASH] == "fake"
        assert a[records.TORCH_VERSION] and a[records.DEVICE] == "cpu" and a[records.NODE]
        assert t.constraints == {"max_peak_memory_gb": pytest.approx(1.0 - 4.0),
                                 records.DIVERGED: -1.0, records.OUT_OF_MEMORY: -1.0}
        assert ("decay_fraction" in t.params) == (t.params["decay"] == "wsd")


def test_nothing_is_left_running_and_counts_match(ok_study):
    _, _, study = ok_study
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 5


def test_submitting_an_existing_name_refuses(ok_study):
    root, spec, study = ok_study
    with pytest.raises(FileExistsError, match="already exists"):
        run(root, spec)
    assert len(study.trials) == 5


def test_resume_of_a_finished_study_runs_nothing(ok_study):
    root, spec, study = ok_study
    summary = run_study(spec, run_dir=root / spec.name, resume=True,
                        trainer=testing.error_train, progress=False)
    assert summary.done == 5 and summary.ran.done == 0 and len(study.trials) == 5


# lr enqueued -> (state, outcome, reason prefix, the constraint that must be violated)
EXPECTED = {
    1e-4: ("infeasible", "diverged at step 7", records.DIVERGED),
    2e-4: ("infeasible", "non-finite objective value", records.DIVERGED),
    3e-4: ("infeasible", "out of memory: OutOfMemoryError: CUDA out of memory",
           records.OUT_OF_MEMORY),
    4e-4: ("infeasible", "out of memory: RuntimeError", records.OUT_OF_MEMORY),
    5e-4: ("fail", "", None),  # reason: the traceback's last lines, checked below
    6e-4: ("infeasible", "constraint max_peak_memory_gb: 8 violates <= 4", "max_peak_memory_gb"),
    7e-4: ("fail", "the trial's worker process died", None),
    3e-3: ("complete", "", None),
}


def test_every_outcome_is_mapped_and_told(ray_session, tmp_path):
    spec = make_spec("outcomes", n=len(EXPECTED), constraints=MEM)
    (tmp_path / spec.name).mkdir()
    store = db.open_storage(db.storage_url(tmp_path / spec.name))
    study = st.create_study(spec, store, make_sampler(spec))
    for lr in EXPECTED:
        study.enqueue_trial({"lr": lr, "warmup_fraction": 0.0, "decay": "cosine"})
    run_study(spec, run_dir=tmp_path / spec.name, resume=True, trainer=testing.mixed_train,
              progress=False)
    trials = study.get_trials()
    assert {t.params["lr"] for t in trials} == set(EXPECTED)
    for t in trials:
        outcome, reason, violated = EXPECTED[t.params["lr"]]
        a = t.user_attrs
        assert a[records.OUTCOME] == outcome, t.params
        assert a[records.REASON].startswith(reason), a[records.REASON]
        if outcome == "fail":
            assert t.state == TrialState.FAIL and t.values is None
            if t.params["lr"] == 7e-4:
                continue
            lines = a[records.REASON].splitlines()
            assert lines[-1] == "ValueError: boom: the trainer hit a bug"
            assert len(lines) <= 8 and records.RECIPE in a
            continue
        assert t.state == TrialState.COMPLETE
        assert all(math.isfinite(v) for v in t.values)  # samplers can rank every one
        if violated:
            assert t.constraints[violated] > 0
        else:
            assert all(v <= 0 for v in t.constraints.values())
    by_lr = {t.params["lr"]: t for t in trials}
    for lr in (1e-4, 2e-4, 3e-4):  # no usable loss: recorded as a model that learned nothing
        assert by_lr[lr].values[0] == pytest.approx(math.log(256))


def test_asha_prunes_laggards_and_their_curve_is_kept(ray_session, tmp_path):
    study = run(tmp_path, make_spec("asha", n=8, conc=1, scheduler="asha"))
    pruned = [t for t in study.trials if t.state == TrialState.PRUNED]
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert pruned and complete and len(pruned) + len(complete) == 8
    for t in pruned:
        curve = t.user_attrs[records.EVAL_CURVE]
        assert t.user_attrs[records.OUTCOME] == "pruned"
        assert t.user_attrs[records.REASON] == f"pruned by ASHA at {curve[-1][0]} tokens"
        assert curve[-1][0] < 300  # stopped before its budget
        assert t.intermediate_values == {}  # TPE would rank pruned trials by them
    for t in complete:  # a trial that used its whole budget is never recorded as pruned
        assert t.user_attrs[records.EVAL_CURVE][-1][0] == 300
        assert max(t.intermediate_values) == 300


def replay_with_optuna_alone(spec, n: int) -> list[dict]:
    """The proposals plain Optuna ask/tell makes for the same spec and the same results."""
    study = optuna.create_study(directions=["minimize", "maximize"], sampler=make_sampler(spec))
    out = []
    for _ in range(n):
        t = study.ask()
        params = spec.space.suggest(t)
        recipe = spec.space.to_recipe(params, seed=0)
        for name in ("max_peak_memory_gb", records.DIVERGED, records.OUT_OF_MEMORY):
            t.set_constraint(name, {"max_peak_memory_gb": -3.0}.get(name, -1.0))
        study.tell(t, [testing.loss_of(recipe), 1e4 * (1 + recipe.warmup_fraction)])
        out.append(params)
    return out


def test_same_spec_and_seed_propose_the_same_configs(ray_session, tmp_path):
    spec = make_spec("det", n=8, conc=1, constraints=MEM)
    study = run(tmp_path, spec)
    through_ray = [t.params for t in study.trials]
    assert through_ray == replay_with_optuna_alone(spec, 8)
    assert through_ray != replay_with_optuna_alone(make_spec("det", n=8, conc=1, seed=1,
                                                             constraints=MEM), 8)


def test_resume_reaps_interrupted_trials_and_reruns_them(ray_session, tmp_path):
    """A driver that died leaves RUNNING trials; resume marks them FAIL and re-runs them."""
    spec = make_spec("resume", n=4)
    (tmp_path / "resume").mkdir()
    store = db.open_storage(db.storage_url(tmp_path / "resume"))
    study = st.create_study(spec, store, make_sampler(spec))
    done = study.ask()
    spec.space.suggest(done)
    study.tell(done, [2.5, 1e4])  # one finished trial from the first driver
    dead = study.ask()
    spec.space.suggest(dead)  # in flight when the driver died
    dead_params = dict(dead.params)
    summary = run_study(spec, run_dir=tmp_path / "resume", resume=True,
                        trainer=testing.quick_train, progress=False)
    assert summary.reaped == (dead.number,)
    trials = study.get_trials()
    assert trials[dead.number].user_attrs[records.REASON] == rs.INTERRUPTED
    assert trials[dead.number].state == TrialState.FAIL
    assert not study.get_trials(states=(TrialState.RUNNING, TrialState.WAITING))
    assert sum(rs.counts_toward_target(t) for t in trials) == 4 == summary.done
    assert trials[done.number].values == [2.5, 1e4]  # kept as it was
    reruns = [t for t in trials if t.user_attrs.get(records.RERUN_OF) == dead.number]
    assert len(reruns) == 1 and reruns[0].params == dead_params
    assert reruns[0].state == TrialState.COMPLETE


def test_stopping_the_driver_records_in_flight_trials_and_queues_them(tmp_path):
    """What run_study does when fit ends early (Ctrl-C): no RUNNING left, same points re-run."""
    from trainers import preset
    from tuner.study.trial.searcher import StudySearcher

    spec = make_spec("stop", n=3)
    (tmp_path / "stop").mkdir()
    study = st.create_study(spec, db.open_storage(db.storage_url(tmp_path / "stop")),
                            make_sampler(spec))
    searcher = StudySearcher(study=study, spec=spec, model_args=preset("debug"), n_to_run=4)
    configs = [searcher.suggest("a"), searcher.suggest("b")]
    assert searcher.tally.running == 2
    searcher.abandon_live()
    trials = study.get_trials()
    assert [t.state for t in trials[:2]] == [TrialState.FAIL] * 2
    assert all(t.user_attrs[records.REASON] == rs.INTERRUPTED for t in trials[:2])
    # re-run on resume, so neither failed nor done in the progress bar
    t = searcher.tally
    assert (t.running, t.interrupted, t.failed, t.done) == (0, 2, 0, 0)
    queued = study.get_trials(states=(TrialState.WAITING,))
    assert [t.user_attrs[records.RERUN_OF] for t in queued] == [0, 1]
    reruns = [searcher.suggest("c"), searcher.suggest("d")]  # the queue comes first
    assert [c["recipe"] for c in reruns] == [c["recipe"] for c in configs]


def test_the_progress_best_is_one_trials_own_values(tmp_path):
    """Per-objective bests would show a recipe that never ran (val_loss of one trial, tok/s of
    another); the bar shows the trial with the best first objective, with its own values."""
    from trainers import preset
    from tuner.study.results.outcome import Outcome, constraint_names
    from tuner.study.trial.searcher import StudySearcher

    spec = make_spec("best", n=3)
    feasible = {name: 0.0 for name in constraint_names(spec)}
    (tmp_path / "best").mkdir()
    study = st.create_study(spec, db.open_storage(db.storage_url(tmp_path / "best")),
                            make_sampler(spec))
    searcher = StudySearcher(study=study, spec=spec, model_args=preset("debug"), n_to_run=3)
    for tid in ("a", "b", "c"):
        searcher.suggest(tid)
    # (val_loss, tokens_per_s): a is the fastest, b has the best val_loss
    for tid, values in (("a", (2.5, 9000.0)), ("b", (2.0, 1000.0)), ("c", (2.2, 5000.0))):
        searcher._finish(tid, Outcome(state="complete", values=values, constraints=feasible))
    t = searcher.tally
    assert t.best_trial == 1 and t.best == {"val_loss": 2.0, "tokens_per_s": 1000.0}
