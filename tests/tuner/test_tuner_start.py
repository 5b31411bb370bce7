"""[start]: enqueued points, the DeepSeek-V3 baseline, warm start from another study.

Spec errors and the baseline's mapping need no Ray; the sampler test asks Optuna directly (as
the searcher does); the end-to-end tests run studies through `run_study` with a fake trainer.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import optuna
import pytest

from trainers import ModelArgs
from trainers.presets import preset
from tuner import testing
from tuner.export.pick import Pick, pick_trial
from tuner.modeling.baselines import proxy_baseline
from tuner.modeling.full_run import build_full_run, target_of
from tuner.modeling.references import DEEPSEEK_V3
from tuner.study.results.outcome import constraint_names
from tuner.study.results.trial_record import trial_records
from tuner.study.run import resume as rs
from tuner.study.run import warm_start as ws
from tuner.study.run.preflight import spec_warnings
from tuner.study.run.runner import run_study
from tuner.study.run.start import begin, start_points
from tuner.study.specs.spec import SpecError, spec_from_dict
from tuner.study.store import records
from tuner.study.store import storage as st
from tuner.study.trial.samplers import make_sampler

SPACE = {"params": {
    "lr": {"type": "float", "low": 1e-4, "high": 3e-2, "log": True},
    "warmup_fraction": {"type": "float", "low": 0.0, "high": 0.2},
    "batch_schedule": {"type": "categorical", "choices": ["constant", "linear"]},
    "batch_ramp_fraction": {"type": "float", "low": 0.01, "high": 0.3,
                            "when": {"batch_schedule": ["linear"]}},
    "batch_end": {"type": "int", "low": 16, "high": 64, "step": 8},
    "precision": {"type": "categorical", "choices": ["bf16", "fp8"]},
    "bias_update_speed": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
}, "fixed": {"batch_start": 8}}


def table(name: str = "s", *, n: int = 4, start: dict | None = None, space: dict | None = None,
          sampler: str = "tpe", seed: int = 0, tokens: int = 300) -> dict:
    d = {"study": {"name": name, "n_trials": n, "max_concurrent": 1, "sampler": sampler,
                   "seed": seed},
         "budget": {"tokens_per_trial": tokens, "eval_every_tokens": tokens // 3},
         "space": space or SPACE}
    if start is not None:
        d["start"] = start
    return d


def spec(name: str = "s", **kw):
    return spec_from_dict(table(name, **kw))


# -- the spec ----------------------------------------------------------------------------------


def test_start_section_parses_and_round_trips():
    s = spec(start={"baselines": ["deepseek-v3"],
                    "enqueue": [{"lr": 1e-3, "precision": "fp8"},
                                {"batch_schedule": "linear", "batch_ramp_fraction": 0.1}],
                    "warm_start": "small"})
    assert s.start.baselines == ("deepseek-v3",) and s.start.n_points == 3
    assert s.start.enqueue[1] == {"batch_schedule": "linear", "batch_ramp_fraction": 0.1}
    assert spec_from_dict(s.to_dict()) == s
    # a spec without [start] stores no "start" table: studies stored before it resume as before
    assert "start" not in spec().to_dict()


@pytest.mark.parametrize(("start", "field", "words"), [
    ({"enqueue": [{"lr": 1e-3}, {"seq_len": 64}]}, "start.enqueue[1].seq_len",
     "must be a searched parameter"),
    ({"enqueue": [{"batch_start": 4}]}, "start.enqueue[0].batch_start", "fixed to 8"),
    ({"enqueue": [{"lr": 0.5}]}, "start.enqueue[0].lr", "[0.0001, 0.03]"),
    ({"enqueue": [{"batch_end": 20}]}, "start.enqueue[0].batch_end", "on steps of 8"),
    ({"enqueue": [{"batch_end": 16.0}]}, "start.enqueue[0].batch_end", "an integer"),
    ({"enqueue": [{"lr": True}]}, "start.enqueue[0].lr", "a number"),
    ({"enqueue": [{"precision": "fp16"}]}, "start.enqueue[0].precision", "one of ['bf16'"),
    ({"enqueue": [{"batch_ramp_fraction": 0.1}]}, "start.enqueue[0].batch_ramp_fraction",
     "is sampled only when batch_schedule is one of ['linear']"),
    ({"enqueue": [{}]}, "start.enqueue[0]", "non-empty table"),
    ({"enqueue": {"lr": 1e-3}}, "start.enqueue", "must be a list"),
    ({"baselines": ["deepseek-v2"]}, "start.baselines[0]", "one of ['deepseek-v3']"),
    ({"baselines": ["deepseek-v3", "deepseek-v3"]}, "start.baselines[1]", "repeat"),
    ({"baselines": ["deepseek-v3"], "enqueue": [{"lr": 1e-3}] * 4}, "start",
     "more than study.n_trials = 4"),
    ({"warm_start": "s"}, "start.warm_start", "another study"),
    ({"warm_start": "a b"}, "start.warm_start", "a study name"),
    ({"warm_start_storage": "sqlite:////tmp/x.db"}, "start.warm_start_storage",
     "only valid with start.warm_start"),
    ({"warm_start": "x", "warm_start_storage": "mongodb://h/db"}, "start.warm_start_storage",
     "database URL"),
    ({"restart": 1}, "start", "unknown key(s) ['restart']"),
])
def test_bad_start_values_name_the_field_the_rule_and_the_value(start, field, words):
    with pytest.raises(SpecError) as e:
        spec(start=start)
    msg = str(e.value)
    assert msg.startswith(f"{field}:"), msg
    assert words in msg, msg


def test_a_point_that_is_no_recipe_is_refused_when_it_sets_every_parameter():
    space = {"params": {"batch_schedule": {"type": "categorical", "choices": ["linear"]},
                        "batch_start": {"type": "int", "low": 4, "high": 64}},
             "fixed": {"batch_end": 32}}
    with pytest.raises(SpecError, match=r"start.enqueue\[0\]: must be a recipe Recipe "
                                        r"accepts \(Recipe.batch_start"):
        spec(space=space, start={"enqueue": [{"batch_schedule": "linear", "batch_start": 48}]})


def test_a_baseline_choice_the_space_lacks_is_refused_not_clipped():
    space = dict(SPACE, params={**SPACE["params"],
                                "precision": {"type": "categorical", "choices": ["bf16"]}})
    with pytest.raises(SpecError) as e:
        spec(space=space, start={"baselines": ["deepseek-v3"]})
    assert str(e.value).startswith("start.baselines[0]: 'deepseek-v3' sets precision = 'fp8'")
    assert "['bf16']" in str(e.value)


def test_a_warm_start_storage_password_is_never_in_the_stored_spec():
    secret = "Warm-S3cret-77"
    s = spec(start={"warm_start": "small",
                    "warm_start_storage": f"postgresql://tuner:{secret}@db.example/studies"})
    stored = json.dumps(s.to_dict())
    assert secret not in stored and "tuner:***@db.example" in stored
    assert s.start.warm_start_storage.endswith(f"{secret}@db.example/studies")  # in memory only


# -- the DeepSeek-V3 baseline ------------------------------------------------------------------

V3_RUN = target_of("deepseek-v3-671b", "h800", 2048, DEEPSEEK_V3.tokens, DEEPSEEK_V3.seq_len)


def _baseline_recipe(args: ModelArgs, tokens: int):
    rules = proxy_baseline(DEEPSEEK_V3, args, proxy_tokens=tokens, seq_len=128)
    return spec().space.to_recipe({r.field: r.value for r in rules} | {"seq_len": 128})


@pytest.mark.parametrize("mup", [False, True])
def test_exporting_the_baseline_gives_deepseek_v3s_recipe_back(mup):
    """The baseline is the export's rules run backwards: export it to DeepSeek-V3's run and the
    published schedule comes back (the ramp's shape up to the proxy's integer batches); the LR
    is the anchored answer's, whose band holds the published one, and gamma keeps its ratio to
    the LR."""
    args = dataclasses.replace(preset("proxy-m"), mup_base_dim=128 if mup else 0)
    tokens = 50_000_000
    proxy = _baseline_recipe(args, tokens)
    full = build_full_run(proxy, args, V3_RUN, proxy_tokens=tokens)
    assert full.answer is not None
    mult = full.answer.width_mult
    assert full.hidden_lr == pytest.approx(full.answer.hidden_lr, rel=1e-9)
    assert full.answer.band[0] / mult < DEEPSEEK_V3.peak_lr < full.answer.band[1] / mult
    assert full.recipe.bias_update_speed / full.recipe.lr == pytest.approx(
        proxy.bias_update_speed / proxy.lr, rel=1e-9)
    assert proxy.lr != pytest.approx(DEEPSEEK_V3.peak_lr)  # it was scaled for the proxy
    assert full.recipe.batch_ramp_fraction == pytest.approx(469 / 14_800)
    assert full.recipe.decay == "wsd" and full.recipe.decay_fraction == pytest.approx(4.8 / 14.8)
    assert full.recipe.min_lr_ratio == pytest.approx(0.1)
    assert full.recipe.precision == "fp8" and full.recipe.batch_schedule == "linear"
    shape = proxy.batch_start / proxy.batch_end
    assert abs(shape - 3072 / 15360) <= 0.5 / proxy.batch_end
    # the proxy's warmup is too short to inform a long run: the published 2000 steps come back
    assert full.steps.warmup == DEEPSEEK_V3.warmup_steps


def test_baseline_values_outside_the_space_are_clipped_and_said():
    s = spec(start={"baselines": ["deepseek-v3"]})
    (point,) = start_points(s, preset("debug"))
    wanted = {r.field: r.value for r in proxy_baseline(DEEPSEEK_V3, preset("debug"),
                                                       proxy_tokens=300, seq_len=128)}
    assert wanted["bias_update_speed"] > 1e-2  # gamma/lr kept: a 300-token proxy's lr is large
    assert point.params["bias_update_speed"] == 1e-2
    assert point.params["lr"] == wanted["lr"] < 3e-2  # inside the range: as mapped
    assert point.params["batch_end"] % 8 == 0 and 16 <= point.params["batch_end"] <= 64
    assert point.params["precision"] == "fp8" and point.params["batch_schedule"] == "linear"
    assert point.params["batch_ramp_fraction"] == pytest.approx(469 / 14_800)
    assert point.origin == "baseline:deepseek-v3" and point.point == "start.baselines[0]"
    notes = " ".join(point.notes)
    assert "bias_update_speed = 0.1028" in notes and "clipped to 0.01" in notes
    assert "lr = " not in notes and len(point.notes) == 2  # bias_update_speed, batch_end
    assert set(point.notes) <= set(spec_warnings(s))
    assert spec_warnings(spec()) == []


# -- queued once, warm-start trials seen by the sampler ----------------------------------------


# lr and warmup only: quick_train's val_loss depends on nothing else
SAMPLED = {"params": {"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
                      "warmup_fraction": {"type": "float", "low": 0.0, "high": 0.2}}}
NARROW = {"params": {**SAMPLED["params"],
                     "lr": {"type": "float", "low": 1e-4, "high": 3e-2, "log": True}}}


def _record_source(study: optuna.Study, s, lrs: list[float]) -> None:
    """Finished trials as the searcher stores them (`quick_train`'s val_loss)."""
    for lr in lrs:
        point = {"lr": lr, "warmup_fraction": 0.05}
        recipe = s.space.to_recipe(point, seed=0)
        result = testing.make_result(recipe, token_budget=300,
                                     val_loss=testing.loss_of(recipe)).to_dict()
        study.add_trial(optuna.trial.create_trial(
            values=[result["val_loss"]], params=point, distributions=s.space.distributions(),
            user_attrs={records.RECIPE: recipe.to_dict(),
                        records.MODEL_ARGS: preset("debug").to_dict(),
                        records.METRICS: {k: v for k, v in result.items()
                                          if not k.endswith("_curve")},
                        records.EVAL_CURVE: result["eval_curve"],
                        records.TRAIN_CURVE: result["train_curve"], records.OUTCOME: "complete"},
            constraints={n: -1.0 for n in constraint_names(s)}))


def _studies(sampler: str, seed: int, *, warm: bool, source_lrs: list[float],
             space: dict = SAMPLED):
    store = optuna.storages.InMemoryStorage()
    small = spec("small", n=12, sampler=sampler, seed=seed, space=SAMPLED)
    source = st.create_study(small, store, make_sampler(small))
    _record_source(source, small, source_lrs)
    large = spec("large", n=12, sampler=sampler, seed=seed, space=space,
                 start={"warm_start": "small"} if warm else None)
    study = st.create_study(large, store, make_sampler(large))
    begin(study, large, points=start_points(large, preset("debug")),
          source=ws.WarmSource(study=source, storage_shown="memory"))
    return large, study


def _proposed_lrs(sampler: str, seed: int, *, warm: bool, n: int) -> list[float]:
    """The first ``n`` proposals, each told its `quick_train` loss as the searcher would."""
    lrs = list(10 ** np.random.default_rng(7).uniform(-4, -1, 30))  # the other study's trials
    s, study = _studies(sampler, seed, warm=warm, source_lrs=lrs)
    out = []
    for _ in range(n):
        trial = study.ask()
        recipe = s.space.to_recipe(s.space.suggest(trial), seed=0)
        for name in constraint_names(s):
            trial.set_constraint(name, -1.0)
        study.tell(trial, testing.loss_of(recipe))
        out.append(recipe.lr)
    return out


def _decades_off(lrs: list[float]) -> float:
    """Mean distance, in decades, from quick_train's best lr (3e-3)."""
    return float(np.mean([abs(math.log10(lr / 3e-3)) for lr in lrs]))


def test_tpe_proposals_move_toward_the_warm_studys_best_region():
    with_warm = [_proposed_lrs("tpe", seed, warm=True, n=6) for seed in range(6)]
    without = [_proposed_lrs("tpe", seed, warm=False, n=6) for seed in range(6)]
    assert all(a != b for a, b in zip(with_warm, without, strict=True))
    closer = [_decades_off(a) < _decades_off(b) for a, b in zip(with_warm, without, strict=True)]
    assert sum(closer) >= 5, closer
    assert np.mean([_decades_off(x) for x in with_warm]) < \
        0.6 * np.mean([_decades_off(x) for x in without])


def test_gp_models_the_warm_trials_from_its_first_proposal():
    pytest.importorskip("scipy")
    with_warm = _proposed_lrs("gp", 0, warm=True, n=3)
    without = _proposed_lrs("gp", 0, warm=False, n=3)  # still GP's random startup trials
    assert with_warm != without
    assert all(abs(math.log10(lr / 3e-3)) < 0.1 for lr in with_warm), with_warm
    assert _decades_off(without) > 2 * _decades_off(with_warm)


def test_warm_trials_are_scored_by_this_spec_marked_and_never_counted():
    s, study = _studies("tpe", 0, warm=True, source_lrs=[1e-3, 3e-3, 0.1],  # 0.1: outside
                        space=NARROW)
    info = study.user_attrs[records.START]["warm_start"]
    assert info["added"] == 2 and info["skipped"] == {"parameters outside this study's space": 1}
    recs = trial_records(study)
    assert [r.origin for r in recs] == ["warm_start:small"] * 2
    assert all(r.outcome == "warm_start" and not r.feasible and r.warm_start for r in recs)
    assert all(r.values["val_loss"] == pytest.approx(testing.loss_of(r.recipe)) for r in recs)
    assert rs.n_done(study) == 0
    assert all(t.constraints == {n: -1.0 for n in constraint_names(s)}
               for t in study.get_trials())
    with pytest.raises(LookupError, match="warm-start trial"):
        pick_trial(study, Pick(kind="trial", trial=0))
    with pytest.raises(LookupError, match="no trial to export"):
        pick_trial(study, Pick(kind="best-loss"))


def test_start_points_are_queued_once_even_after_a_driver_died_half_way():
    s = spec(start={"baselines": ["deepseek-v3"], "enqueue": [{"lr": 1e-3}, {"lr": 2e-3}]})
    study = st.create_study(s, optuna.storages.InMemoryStorage(), make_sampler(s))
    # the first driver queued one point, then died before recording START
    study.enqueue_trial({"lr": 1e-3}, user_attrs={records.ORIGIN: "enqueued",
                                                  records.START_POINT: "start.enqueue[0]"})
    for _ in range(2):  # the resumed driver, then a later resume
        begin(study, s, points=start_points(s, preset("debug")), source=None)
    trials = study.get_trials()
    assert sorted(t.user_attrs[records.START_POINT] for t in trials) == [
        "start.baselines[0]", "start.enqueue[0]", "start.enqueue[1]"]
    assert len(study.user_attrs[records.START]["points"]) == 3


# -- end to end through run_study --------------------------------------------------------------


def _run(root: Path, s, **kw) -> optuna.Study:
    summary = run_study(s, run_dir=root / s.name, trainer=testing.quick_train, progress=False,
                        **kw)
    return optuna.load_study(study_name=s.name, storage=summary.storage)


def _origins(study: optuna.Study) -> list[str]:
    return [t.user_attrs.get(records.ORIGIN, "") for t in study.get_trials()]


@pytest.fixture(scope="module")
def warm_started(ray_session, tmp_path_factory):
    root = tmp_path_factory.mktemp("start")
    # the smaller study: quick_train's best lr (3e-3) is one of its trials, so a warm-start trial
    # would be every pick's choice if one were a candidate
    small = spec("small", n=3, start={"enqueue": [{"lr": 3e-3, "warmup_fraction": 0.0}]})
    _run(root, small)
    large = spec("large", n=4, tokens=600,
                 start={"baselines": ["deepseek-v3"], "enqueue": [{"lr": 1e-3}],
                        "warm_start": "small"})
    return root, large, _run(root, large)


def test_baseline_and_enqueued_points_run_first_and_count(warm_started):
    _, large, study = warm_started
    own = [t for t in study.get_trials() if not t.user_attrs.get(records.WARM_START_OF)]
    assert [t.user_attrs.get(records.ORIGIN, "") for t in own[:2]] == [
        "baseline:deepseek-v3", "enqueued"]
    (point,) = [p for p in start_points(large, preset("debug")) if p.origin != "enqueued"]
    assert {k: own[0].params[k] for k in point.params} == point.params
    assert own[1].params["lr"] == 1e-3
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in own)
    assert len(own) == 4 and rs.n_done(study) == 4  # the 3 warm-start trials do not count


def test_warm_start_trials_are_added_marked_and_not_ranked(warm_started):
    root, _, study = warm_started
    recs = trial_records(study)
    warm = [r for r in recs if r.warm_start]
    assert len(warm) == 3 and {r.outcome for r in warm} == {"warm_start"}
    assert not any(r.feasible for r in warm)
    best = min(warm, key=lambda r: r.values["val_loss"])
    assert best.values["val_loss"] == pytest.approx(2.0)  # lr 3e-3, no warmup: the optimum
    assert all(r.values["val_loss"] > 2.0 for r in recs if not r.warm_start)
    for kind in ("best-loss", "knee"):
        assert not pick_trial(study, Pick(kind=kind)).record.warm_start
    with pytest.raises(LookupError, match="measured by study 'small'"):
        pick_trial(study, Pick(kind="trial", trial=best.number))
    info = study.user_attrs[records.START]["warm_start"]
    assert info["storage"] == f"sqlite:///{(root / 'small' / 'study.db').resolve()}"


def test_reports_mark_the_start_and_the_warm_start(warm_started, tmp_path):
    import reports

    _, _, study = warm_started
    paths = reports.build(study, tmp_path)
    md, page = paths["ranked_md"].read_text(), paths["report_html"].read_text()
    assert "warm start from small" in md and "3 trials, not ranked" in md
    assert "warm start from small" in page and "3 trials, not ranked" in page
    assert "baseline:deepseek-v3 (start.baselines[0])" in md
    assert "enqueued (start.enqueue[0])" in md
    frame = reports.trials_frame(study)
    warm = frame[frame["origin"] == "warm_start:small"]
    assert len(warm) == 3 and warm["pareto_rank"].isna().all() and not warm["knee"].any()
    # neither plotted nor paired in the fp8 section: another study measured them
    from reports import series
    from reports.sections.fp8_gap import fp8_gaps

    snap = reports.take_snapshot(study)
    numbers = set(warm["number"])
    assert not set(series.with_values(snap)["number"]) & numbers
    assert not {n for g in fp8_gaps(snap) for n in (g.fp8_trial, g.bf16_trial)} & numbers


def test_resume_does_not_queue_or_add_anything_twice(warm_started):
    root, large, _ = warm_started
    more = dataclasses.replace(large, study=dataclasses.replace(large.study, n_trials=6))
    study = _run(root, more, resume=True)
    assert _origins(study).count("baseline:deepseek-v3") == 1
    assert _origins(study).count("enqueued") == 1
    assert _origins(study).count("warm_start:small") == 3
    assert rs.n_done(study) == 6


def test_a_missing_study_to_warm_from_is_a_spec_error_and_nothing_is_written(tmp_path):
    s = spec("orphan", start={"warm_start": "nowhere"})
    with pytest.raises(ws.WarmStartError, match=r"^start.warm_start: must name a study to "
                                                r"warm-start from in sqlite:///.*'nowhere'"):
        run_study(s, run_dir=tmp_path / "orphan", trainer=testing.quick_train, progress=False)
    assert not (tmp_path / "orphan").exists() and not (tmp_path / "nowhere").exists()


def test_a_study_with_other_objectives_is_refused(tmp_path):
    store_url = f"sqlite:///{tmp_path / 'shared.db'}"
    other = spec_from_dict(table("other") | {"objectives": {"val_loss": "minimize",
                                                            "tokens_per_s": "maximize"}})
    from tuner.study.store import database as db
    st.create_study(other, db.open_storage(store_url), make_sampler(other))
    s = spec("mine", start={"warm_start": "other", "warm_start_storage": store_url})
    with pytest.raises(ws.WarmStartError, match="the objectives must match"):
        ws.open_source(s, url=store_url, run_dir=tmp_path / "mine")


@pytest.mark.parametrize(("start", "words"), [
    ('warm_start = "nowhere"', ["start.warm_start: must name a study", "'nowhere'"]),
    ("enqueue = [{lr = 0.5}]", ["start.enqueue[0].lr: must be a value", "but got 0.5"]),
])
def test_the_cli_refuses_a_bad_start_with_exit_2_and_writes_nothing(tmp_path, capsys, start,
                                                                     words):
    from tuner.app.cli import main

    path = tmp_path / "spec.toml"
    path.write_text('[study]\nname = "cli-start"\nn_trials = 2\n[budget]\n'
                    'tokens_per_trial = 300\n[space.params.lr]\ntype = "float"\nlow = 1e-4\n'
                    f'high = 3e-2\nlog = true\n[start]\n{start}\n')
    root = tmp_path / "runs"
    assert main(["submit", str(path), "--root", str(root), "--no-progress",
                 "--trainer", "tuner.testing:quick_train"]) == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words), err
    assert "Traceback" not in err and not root.exists()


def test_a_rerun_of_an_interrupted_start_trial_keeps_its_origin():
    t = optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, params={},
                                  distributions={},
                                  user_attrs={records.ORIGIN: "baseline:deepseek-v3",
                                              records.START_POINT: "start.baselines[0]",
                                              records.RECIPE: {}})
    assert records.rerun_attrs(t) == {records.RERUN_OF: t.number,
                                 records.ORIGIN: "baseline:deepseek-v3",
                                 records.START_POINT: "start.baselines[0]"}


def test_a_timed_objective_takes_the_source_trials_timing_or_skips_the_copy():
    # a copy scored without a timing would record the timed objective's worst value (0 tok/s)
    # and teach the sampler that the recipe is slow
    timed = {**table("timed", space=SAMPLED), "objectives": {"val_loss": "minimize",
                                              "timed_tokens_per_s": "maximize"}}
    s = spec_from_dict(timed)
    source = optuna.create_study()
    _record_source(source, s, [1e-3, 3e-3])
    untimed, with_timing = source.get_trials()
    with_timing.user_attrs[records.TIMING] = {"tokens_per_s": 12345.0, "spread": 0.02,
                                              "source": "probed"}
    copy, why = ws.warm_copy(untimed, s, "small")
    assert copy is None and "no timing" in why
    copy, why = ws.warm_copy(with_timing, s, "small")
    assert why == "" and copy.values[1] == pytest.approx(12345.0)
    # a spec without a timed objective copies both
    assert ws.warm_copy(untimed, spec(space=SAMPLED), "small")[0] is not None
