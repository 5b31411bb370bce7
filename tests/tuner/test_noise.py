"""Run-to-run noise of val_loss: measured at the end of a study from other seeds of its top
trials, stored as records.NOISE, never counted as trials."""

from __future__ import annotations

import dataclasses
import math
import pickle
import sys
from types import SimpleNamespace

import optuna
import pytest

from tests.utils.specs import minimal_spec
from trainers import Recipe, preset
from tuner import testing
from tuner.study.results.noise import (
    combined_noise,
    knee_ties,
    pooled_sd,
    tied,
    top_trials,
)
from tuner.study.results.trial_record import Objective, TrialRecord, trial_records
from tuner.study.run.noise_retrain import measure_noise
from tuner.study.run.runner import run_study
from tuner.study.specs.spec import SpecError
from tuner.study.store import records

SPACE = {"params": {"lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}},
         "fixed": {"seq_len": 64}}


def spec(**study):
    return minimal_spec("noisy", study=study, space=SPACE)


def trained_without_noise(s, tmp_path):
    """``s``'s study run with `testing.seed_noise_train`, its noise measurement then cleared."""
    summary = run_study(s, run_dir=tmp_path / s.name, trainer=testing.seed_noise_train,
                        progress=False)
    study = optuna.load_study(study_name=s.name, storage=summary.storage)
    study.set_user_attr(records.NOISE, None)
    return study


def test_pooled_sd_on_hand_cases():
    assert pooled_sd([[2.0, 2.02, 1.98], [3.0, 3.02, 2.98]]) == pytest.approx(0.02)
    # groups pool their squares and degrees of freedom: (0.02² + 0.08²) / (1 + 1)
    assert pooled_sd([[1.0, 1.02], [1.0, 1.08]]) == pytest.approx(math.sqrt(0.0034 / 2))
    assert pooled_sd([[1.0, 1.1, math.nan], [5.0]]) == pytest.approx(0.1 / math.sqrt(2))
    assert math.isnan(pooled_sd([[1.0], [2.0, math.inf]]))


def test_tied_is_a_difference_within_the_sd():
    assert tied(2.00, 2.015, 0.02) and tied(2.0, 1.98, 0.02)
    assert not tied(2.0, 2.05, 0.02)
    assert not tied(2.0, 2.0, None)  # not measured: nothing is called tied
    assert not tied(2.0, math.nan, 0.02)


def test_noise_spec_fields_are_validated():
    assert (spec().study.noise_repeats, spec().study.noise_top) == (0, 2)
    with pytest.raises(SpecError, match=r"study.noise_repeats: must be >= 0.*but got -1"):
        spec(noise_repeats=-1)
    with pytest.raises(SpecError, match=r"study.noise_top: must be >= 1.*but got 0"):
        spec(noise_top=0)


def test_study_measures_the_spread_of_other_seeds_without_counting_them(ray_session, tmp_path):
    s = spec(noise_repeats=2, noise_top=2)
    summary = run_study(s, run_dir=tmp_path / s.name, trainer=testing.seed_noise_train,
                        progress=False)
    study = optuna.load_study(study_name=s.name, storage=summary.storage)
    assert len(study.trials) == s.study.n_trials == summary.done  # re-runs are not trials
    noise = study.user_attrs[records.NOISE]
    # trials train with seed 0, re-runs with seeds 1 and 2: offsets 0, +sd, -sd per recipe
    assert noise["sd"] == pytest.approx(testing.SEED_NOISE_SD)
    assert noise["n"] == 2 * 3 and "2 recipe(s) x 3 seeds" in noise["how"]
    top = top_trials(trial_records(study), 2)
    assert noise["trials"] == [r.number for r in top]
    assert sorted((r["trial"], r["seed"]) for r in noise["runs"]) == sorted(
        (r.number, seed) for r in top for seed in (1, 2))

    # measured once: the same top trials are not re-trained
    calls = []
    def counting(*a, **kw):
        calls.append(kw["seed"])
        return testing.seed_noise_train(*a, **kw)
    assert measure_noise(study, s, trainer=counting) == noise and calls == []
    # stopped before a run: nothing stored; off (the default): nothing measured
    study.set_user_attr(records.NOISE, None)
    assert measure_noise(study, s, trainer=counting, should_stop=lambda: True) is None
    assert study.user_attrs[records.NOISE] is None and calls == []
    off = dataclasses.replace(s, study=dataclasses.replace(s.study, noise_repeats=0))
    assert measure_noise(study, off, trainer=counting) is None and calls == []


def test_a_failed_re_run_is_recorded_and_left_out(ray_session, tmp_path):
    s = spec(noise_repeats=2, noise_top=1)
    study = trained_without_noise(s, tmp_path)

    def fails_on_seed_2(*a, **kw):
        if kw["seed"] == 2:
            raise ValueError("boom")
        return testing.seed_noise_train(*a, **kw)
    said: list[str] = []
    noise = measure_noise(study, s, trainer=fails_on_seed_2, log=said.append)
    assert noise is not None and noise["n"] == 3
    # progress: what is re-trained, then each run counted, prefixed once by the study's name
    assert said[0].startswith("noisy: re-training its 1 best trial(s) with 2 other seed(s)")
    assert [line.split(": trial")[0] for line in said[1:]] == [
        "noisy: re-training 1/2", "noisy: re-training 2/2"]
    assert noise["sd"] == pytest.approx(testing.SEED_NOISE_SD / math.sqrt(2))  # 2 finite runs
    assert [r.get("error") for r in noise["runs"]] == [None, "ValueError: boom"]


def rec(number: int, loss: float, memory: float, *, feasible: bool = True) -> TrialRecord:
    return TrialRecord(number=number, state=optuna.trial.TrialState.COMPLETE, outcome="complete",
                       reasons=(), values={"val_loss": loss, "peak_memory_gb": memory},
                       constraints={}, params={}, feasible=feasible)


TWO = [Objective(name="val_loss", direction="minimize"),
       Objective(name="peak_memory_gb", direction="minimize")]


def test_knee_ties_are_the_trials_within_the_noise_of_the_knee():
    # front #0..#3, knee #1 (2.01, 1.5); #4 is dominated and worse on memory, which has no
    # noise estimate, #5 infeasible: never tied
    recs = [rec(0, 2.00, 2.0), rec(1, 2.01, 1.5), rec(2, 2.5, 1.0), rec(3, 1.9, 3.0),
            rec(4, 2.015, 3.5), rec(5, 2.01, 0.1, feasible=False)]
    ties = knee_ties(recs, TWO, 0.02)
    assert ties.knee == 1 and ties.tied == (0,)
    assert ties.noise == {"val_loss": 0.02} and ties.unjudged == ("peak_memory_gb",)
    assert knee_ties(recs, TWO, 0.5).tied == (0, 2, 3)  # every front member, within 0.5
    assert knee_ties(recs, TWO, 0.002).tied == ()
    unmeasured = knee_ties(recs, TWO, None)
    assert unmeasured.knee == 1 and not unmeasured.judged and not unmeasured.measured
    assert "noise_repeats" in unmeasured.sentence()
    # noise measured, but no objective is val_loss: nothing can be judged
    other = [Objective(name="peak_memory_gb", direction="minimize"),
             Objective(name="tokens_per_s", direction="maximize")]
    recs2 = [dataclasses.replace(r, values={"peak_memory_gb": r.values["val_loss"],
                                            "tokens_per_s": r.values["peak_memory_gb"]})
             for r in recs[:4]]
    assert knee_ties(recs2, other, 0.02).tied == ()
    assert "no objective is val_loss" in knee_ties(recs2, other, 0.02).sentence()
    assert knee_ties([rec(0, 1.0, 1.0, feasible=False)], TWO, 0.02) is None


def test_with_one_objective_every_feasible_trial_is_a_candidate():
    one = [Objective(name="val_loss", direction="minimize")]
    recs = [dataclasses.replace(rec(n, loss, 0.0), values={"val_loss": loss})
            for n, loss in enumerate((2.03, 2.0, 2.015, 2.5))]
    ties = knee_ties(recs, one, 0.02)
    assert (ties.knee, ties.tied, ties.single) == (1, (2,), True)
    assert "the best trial #1 is tied with #2" in ties.sentence()


def test_combined_noise_pools_by_degrees_of_freedom():
    def attrs(sd, n, trials):
        return {records.NOISE: {"sd": sd, "n": n, "trials": trials}}

    # 6 runs of 2 recipes: 4 degrees of freedom each
    sd, n = combined_noise([attrs(0.02, 6, [0, 1]), attrs(0.03, 6, [0, 1])])
    assert n == 12 and sd == pytest.approx(math.sqrt((4 * 0.02**2 + 4 * 0.03**2) / 8))
    # 9 runs of 3 recipes (6 dof) against 3 runs of 1 (2 dof)
    sd, n = combined_noise([attrs(0.01, 9, [0, 1, 2]), attrs(0.05, 3, [4])])
    assert n == 12 and sd == pytest.approx(math.sqrt((6 * 0.01**2 + 2 * 0.05**2) / 8))
    assert combined_noise([attrs(0.02, 6, [0, 1]), {}]) == (0.02, 6)
    assert combined_noise([{}, {records.NOISE: {"sd": "nan"}}]) is None


def test_a_modeled_objective_ties_only_on_equal_values():
    # full_gpu_hours is modeled from the recipe: no run-to-run noise, so #0 (within the val_loss
    # noise of the knee #1 but dearer on the model) is not tied with it, where a measured
    # objective without a noise estimate would leave it tied (the test above); #2 has the knee's
    # cost and a loss worse by less than the noise: the knee dominates it, yet the data cannot
    # order them, so it is tied
    modeled = [Objective(name="val_loss", direction="minimize"),
               Objective(name="full_gpu_hours", direction="minimize")]

    def cost(number, loss, hours):
        return dataclasses.replace(rec(number, loss, 0.0),
                                   values={"val_loss": loss, "full_gpu_hours": hours})

    recs = [cost(0, 2.00, 2.0e6), cost(1, 2.01, 1.5e6), cost(2, 2.015, 1.5e6),
            cost(3, 2.5, 1.0e6), cost(4, 1.9, 3.0e6)]
    ties = knee_ties(recs, modeled, 0.02)
    assert ties.noise == {"val_loss": 0.02, "full_gpu_hours": 0.0} and not ties.unjudged
    assert ties.knee == 1 and ties.tied == (2,)
    assert "full_gpu_hours exact: modeled" in ties.sentence()


def test_a_timed_objective_ties_within_its_timings_spread():
    # knee #1; #0 is within the val_loss noise and 4.8% faster: tied when timings spread 20%
    # (±10%), not when they spread 2% (±1%); #2 is far off on val_loss either way
    timed = [Objective(name="val_loss", direction="minimize"),
             Objective(name="timed_tokens_per_s", direction="maximize")]

    def t(number, loss, speed, spread):
        return dataclasses.replace(rec(number, loss, 0.0), values={
            "val_loss": loss, "timed_tokens_per_s": speed}, timing={"spread": spread})

    for spread, tie in ((0.20, True), (0.02, False)):
        recs = [t(0, 2.00, 21_000.0, spread), t(1, 1.99, 20_000.0, spread),
                t(2, 2.60, 30_000.0, spread)]
        ties = knee_ties(recs, timed, 0.02)
        assert ties.knee in (0, 1) and not ties.unjudged
        assert ties.relative == {"timed_tokens_per_s": pytest.approx(spread / 2)}
        assert ties.tied == ((1 - ties.knee,) if tie else ())  # the other of #0, #1
        assert "half the median range of its timings' repeats" in ties.sentence()


def test_a_study_re_trains_on_ray_max_concurrent_at_once(ray_session, tmp_path):
    import functools

    meet = tmp_path / "meet"
    meet.mkdir()
    s = spec(noise_repeats=2, noise_top=2, max_concurrent=2)
    summary = run_study(s, run_dir=tmp_path / s.name, trainer=testing.seed_noise_train,
                        progress=False)
    study = optuna.load_study(study_name=s.name, storage=summary.storage)
    in_study = study.user_attrs[records.NOISE]
    assert in_study["sd"] == pytest.approx(testing.SEED_NOISE_SD)

    # the same runs as one after another in this process, in the same order
    study.set_user_attr(records.NOISE, None)
    alone = measure_noise(study, s, trainer=testing.seed_noise_train)
    assert alone["runs"] == in_study["runs"] and alone["sd"] == in_study["sd"]

    # two at a time: every run met another one in flight (a run alone would read inf)
    study.set_user_attr(records.NOISE, None)
    meeting = functools.partial(testing.rendezvous_train, meet_dir=str(meet))
    together = measure_noise(study, s, trainer=meeting, on_ray=True)
    assert together is not None and len(list(meet.iterdir())) == 4
    assert [r["val_loss"] for r in together["runs"]] == [r["val_loss"] for r in alone["runs"]]


def test_a_stop_cancels_the_runs_in_flight_and_stores_nothing(ray_session, tmp_path):
    s = spec(noise_repeats=2, noise_top=2, max_concurrent=2)
    study = trained_without_noise(s, tmp_path)
    polls = []

    def stop_on_second_poll():
        polls.append(1)
        return len(polls) >= 2
    slow = testing.slow_train  # ~1 s per evaluation: still in flight at the second poll
    assert measure_noise(study, s, trainer=slow, should_stop=stop_on_second_poll,
                         on_ray=True) is None
    assert study.user_attrs[records.NOISE] is None and len(polls) == 2


def test_a_run_whose_worker_dies_is_recorded_and_left_out(ray_session, tmp_path):
    s = spec(noise_repeats=2, noise_top=1, max_concurrent=2)
    study = trained_without_noise(s, tmp_path)
    noise = measure_noise(study, s, trainer=testing.seed_2_crash_train, on_ray=True)
    assert noise is not None and noise["n"] == 3
    assert [r["seed"] for r in noise["runs"]] == [1, 2]
    assert noise["runs"][0].get("error") is None
    assert noise["runs"][1]["val_loss"] == "nan" and "Worker" in noise["runs"][1]["error"]



@dataclasses.dataclass(eq=False)
class _Ref:
    value: dict


class _RecordingRay:
    """Stands in for ``ray`` in `noise_retrain._retrain_on_ray`: each task's arguments are
    pickled as Ray would send them, kept, unpickled and run here."""

    def __init__(self):
        self.sent: list[bytes] = []
        self.options: list[dict] = []

    def remote(self, **options):
        self.options.append(options)
        return lambda fn: SimpleNamespace(remote=lambda *args: self._run(fn, args))

    def _run(self, fn, args):
        self.sent.append(pickle.dumps(args))
        return _Ref(fn(*pickle.loads(self.sent[-1])))

    def wait(self, refs, *, num_returns, timeout):
        return refs[:num_returns], refs[num_returns:]

    def get(self, ref):
        return ref.value

    def cancel(self, ref, *, force):
        raise AssertionError("nothing is in flight once every run has ended")


def test_a_re_training_task_receives_a_training_and_never_the_storage_url(monkeypatch):
    """What a noise re-training's Ray task receives: the trial's number, one `Training` and
    the trainer; a password in the study's storage URL is in none of it."""
    from tuner.study.run import noise_retrain as noise
    from tuner.study.trial.training import Training

    s = spec(noise_repeats=2, max_concurrent=2,
             storage="postgresql://ops:s3cret@db.example:5432/moetune")
    assert b"s3cret" in pickle.dumps(s)  # the spec itself would carry it
    ray = _RecordingRay()
    monkeypatch.setitem(sys.modules, "ray", ray)
    rec = SimpleNamespace(number=3, model_args_dict=preset("debug").to_dict(),
                          recipe_dict=Recipe(seq_len=64, lr=1e-3).to_dict())
    runs = noise._retrain_on_ray([(rec, 1), (rec, 2)], s, trainer=testing.seed_noise_train,
                                 should_stop=lambda: False, log=None)
    assert [(r["trial"], r["seed"]) for r in runs] == [(3, 1), (3, 2)]
    assert all(r.get("error") is None for r in runs)
    assert ray.options == [{"num_cpus": 1.0, "num_gpus": 0.0, "max_retries": 0}]
    assert len(ray.sent) == 2
    for blob in ray.sent:
        assert b"s3cret" not in blob and b"postgresql" not in blob
        number, training, trainer = pickle.loads(blob)
        assert number == 3 and type(training) is Training
        assert trainer is testing.seed_noise_train
    assert [pickle.loads(b)[1].seed for b in ray.sent] == [1, 2]


def test_a_re_trainings_progress_line_rounds_its_loss_as_the_bar_does():
    from tuner.study.run.noise_retrain import _said

    run = {"trial": 3, "seed": 1, "val_loss": 2.4644588232040405}
    assert _said(run, 1, 4, "qs").endswith("trial 3 with seed 1: val_loss 2.4645")
    assert _said(run | {"val_loss": "nan"}, 2, 4, "qs").endswith("val_loss nan")
