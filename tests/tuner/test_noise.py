"""Run-to-run noise of val_loss: measured at the end of a study from other seeds of its top
trials, stored as records.NOISE, never counted as trials."""

from __future__ import annotations

import dataclasses
import math

import optuna
import pytest

from tuner import testing
from tuner.study import records
from tuner.study.noise import measure_noise, pooled_sd, tied, top_trials
from tuner.study.runner import run_study
from tuner.study.spec import SpecError, spec_from_dict
from tuner.study.trial_record import trial_records

SPACE = {"params": {"lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}},
         "fixed": {"seq_len": 64}}


def spec(**study):
    return spec_from_dict({
        "study": {"name": "noisy", "n_trials": 4, "max_concurrent": 1, **study},
        "budget": {"tokens_per_trial": 300, "eval_every_tokens": 100},
        "pruning": {"scheduler": "none"},
        "space": SPACE,
    })


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
    summary = run_study(s, run_dir=tmp_path / s.name, trainer=testing.seed_noise_train,
                        progress=False)
    study = optuna.load_study(study_name=s.name, storage=summary.storage)
    study.set_user_attr(records.NOISE, None)

    def fails_on_seed_2(*a, **kw):
        if kw["seed"] == 2:
            raise ValueError("boom")
        return testing.seed_noise_train(*a, **kw)
    noise = measure_noise(study, s, trainer=fails_on_seed_2)
    assert noise is not None and noise["n"] == 3
    assert noise["sd"] == pytest.approx(testing.SEED_NOISE_SD / math.sqrt(2))  # 2 finite runs
    assert [r.get("error") for r in noise["runs"]] == [None, "ValueError: boom"]
