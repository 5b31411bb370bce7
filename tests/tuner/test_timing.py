"""The timed cost: systems signatures, the probe, its caches, and the machine's core lock."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from tests.utils.waiting import ended, wait_until
from trainers import Recipe, preset
from trainers.loop import StepTime
from tuner import testing
from tuner.study.trial import timing
from tuner.study.trial.cores import CoreLock

ARGS = preset("debug")
BUDGET = 200_000
BASE = Recipe(batch_schedule="linear", batch_start=8, batch_end=32, precision="bf16")
WHERE = timing.Where(device="cpu", threads=1, hardware="x", torch="t", timer="fake")


def sig(recipe: Recipe, budget: int = BUDGET, where: timing.Where = WHERE) -> str:
    return timing.signature(timing.what_key(ARGS, recipe, budget), where)


# -- the signature -----------------------------------------------------------------------------

@pytest.mark.parametrize("change", [
    {"lr": 1e-2}, {"warmup_fraction": 0.2}, {"decay": "wsd"}, {"min_lr_ratio": 0.3},
    {"bias_update_speed": 1e-2}, {"weight_decay": 0.0}, {"beta2": 0.99}, {"seed": 7},
    {"spike_policy": "skip"}, {"mtp_lambda": 0.1}, {"grad_clip": 0.5}])
def test_knobs_that_do_not_change_the_computation_keep_the_signature(change):
    assert sig(dataclasses.replace(BASE, **change)) == sig(BASE)


@pytest.mark.parametrize("change", [
    {"batch_end": 64}, {"batch_start": 16}, {"batch_schedule": "step"},
    {"batch_ramp_fraction": 0.3}, {"precision": "fp32"}, {"checkpoint_ratio": 0.5},
    {"micro_batch": 4}, {"seq_len": 64}])
def test_systems_knobs_change_the_signature(change):
    assert sig(dataclasses.replace(BASE, **change)) != sig(BASE)


def test_where_and_budget_are_part_of_the_signature():
    assert sig(BASE, budget=100_000) != sig(BASE)
    for field, value in (("threads", 2), ("device", "cuda"), ("hardware", "y"), ("torch", "u"),
                         ("timer", "real")):
        assert sig(BASE, where=dataclasses.replace(WHERE, **{field: value})) != sig(BASE)


def test_schedules_that_take_the_same_steps_share_a_signature():
    """A constant batch ignores batch_start and the ramp: the steps, not the fields, count."""
    a = Recipe(batch_schedule="constant", batch_start=8, batch_end=32)
    b = Recipe(batch_schedule="constant", batch_start=32, batch_end=32,
               batch_ramp_fraction=0.5)
    assert sig(a) == sig(b)


@pytest.mark.parametrize("schedule", ["constant", "linear", "step"])
def test_run_steps_are_the_steps_train_takes(schedule):
    from trainers import train

    r = Recipe(batch_schedule=schedule, batch_start=2, batch_end=8, batch_ramp_fraction=0.5,
               precision="fp32")
    budget = 40 * 128 + 100  # a cut last batch; rounded down to whole sequences
    steps = timing.run_steps(r, budget)
    res = train(ARGS, r, token_budget=budget, eval_every_tokens=budget, eval_sequences=4,
                device="cpu")
    assert sum(k for _, k in steps) == res.steps
    assert sum(n * k for n, k in steps) * 128 == res.tokens_trained


@pytest.mark.parametrize("schedule", ["constant", "linear", "step"])
@pytest.mark.parametrize("budget", [128, 5_000, 200_000, 1_234_567])
def test_run_steps_matches_the_loop_step_by_step(schedule, budget):
    from trainers.config.schedules import batch_size_at

    r = Recipe(batch_schedule=schedule, batch_start=3, batch_end=40, batch_ramp_fraction=0.3,
               batch_multiple=1)
    full, tokens, naive = budget // 128 * 128, 0, []
    while tokens < full:
        n = min(batch_size_at(r, tokens, full), (full - tokens) // 128)
        tokens += n * 128
        naive.append(n)
    assert [n for n, k in timing.run_steps(r, budget) for _ in range(k)] == naive


def test_timed_sizes_and_run_seconds():
    assert timing.timed_sizes([(32, 48), (26, 1)]) == (32,)  # a cut last step is left out
    assert timing.timed_sizes([(8, 10), (16, 10), (32, 10)]) == (8, 16, 32)  # a step schedule
    assert timing.timed_sizes([(8, 1), (12, 1), (20, 1), (32, 40)]) == (8, 32)  # a ramp
    assert timing.timed_sizes([(8, 1), (12, 1), (20, 30), (32, 4)]) == (8, 20, 32)
    # a step's seconds, affine in its batch: interpolation between timed sizes is then exact
    steps = [(8, 1), (12, 1), (20, 1), (32, 40), (6, 1)]
    per = {n: 0.002 + 0.001 * n for n in (8, 32)}
    want = sum(k * (0.002 + 0.001 * n) for n, k in steps[:-1]) + per[8] * 6 / 8
    assert timing.run_seconds(steps, per) == pytest.approx(want)


# -- the probe ---------------------------------------------------------------------------------

def test_probe_times_the_runs_steps_with_the_step_timer():
    r = Recipe(batch_schedule="constant", batch_start=32, batch_end=32, precision="fp8",
               checkpoint_ratio=0.5)
    e = timing.probe(ARGS, r, token_budget=BUDGET, data=None, device="cpu",
                     timer=testing.StepTimer, clock="cpu")
    steps = timing.run_steps(r, BUDGET)  # 48 steps of 32, one of 26
    seconds = sum(k * testing.step_seconds(r, 32) * n / 32 for n, k in steps)
    assert e["tokens_per_s"] == pytest.approx(e["tokens"] / seconds)
    assert e["tokens"] == BUDGET // 128 * 128
    assert e["spread"] == 0.0 and len(e["repeats"]) == timing.MIN_REPEATS
    assert e["label"] == "emulated" and e["sizes"] == [32] and e["clock"] == "cpu"


class _Scripted:
    """A step timer whose repeats alternate between (1 - noise) and (1 + noise) times 10 ms."""

    noise = 0.0

    def __init__(self, model_args, recipe, *, data=None, device=None):
        self.fp8_emulated, self.calls = None, 0

    def step(self, n_seqs):
        self.calls += 1
        repeat = max(0, self.calls - timing.WARMUP_STEPS - 1) // timing.STEPS
        seconds = 0.01 * (1 + (self.noise if repeat % 2 else -self.noise))
        return StepTime(wall_s=seconds, cpu_s=seconds)


@pytest.mark.parametrize(("noise", "repeats"), [(0.0, timing.MIN_REPEATS),
                                                (0.005, timing.MIN_REPEATS),
                                                (0.2, timing.MAX_REPEATS)])
def test_repeats_go_on_until_the_spread_is_known(noise, repeats):
    r = Recipe(batch_schedule="constant", batch_start=8, batch_end=8)
    _Scripted.noise = noise
    e = timing.probe(ARGS, r, token_budget=BUDGET, data=None, device="cpu", timer=_Scripted)
    assert len(e["repeats"]) == repeats
    assert e["spread"] == pytest.approx((1 / (1 - noise) - 1 / (1 + noise)) * (1 - noise))
    assert (e["spread"] <= timing.TARGET_SPREAD) == (repeats < timing.MAX_REPEATS)


def test_probe_with_the_real_step_timer():
    from trainers.loop import StepTimer

    r = Recipe(batch_schedule="linear", batch_start=2, batch_end=4, precision="fp32")
    e = timing.probe(ARGS, r, token_budget=4096, data=None, device="cpu", timer=StepTimer)
    assert e["tokens_per_s"] > 0 and e["label"] == "measured" and e["sizes"] == [2, 3, 4]
    assert timing.MIN_REPEATS <= len(e["repeats"]) <= timing.MAX_REPEATS


# -- the caches --------------------------------------------------------------------------------

class _MustNotRun:
    def __init__(self, *a, **k):
        raise AssertionError("probed although the timing was cached")


def test_measure_reuses_the_study_cache_then_the_machine_file(tmp_path):
    lock = CoreLock(tmp_path / "cores")
    kw = dict(token_budget=BUDGET, data=None, device="cpu", lock=lock,
              cache_dir=tmp_path / "files")
    scope = timing.new_scope()
    first, src = timing.measure(ARGS, BASE, timer=testing.StepTimer, scope=scope, **kw)
    assert src == "probed" and first["what"] == timing.what_key(ARGS, BASE, BUDGET)
    again, src = timing.measure(ARGS, dataclasses.replace(BASE, lr=0.01),
                                timer=testing.StepTimer, scope=scope, **kw)
    assert src == "shared" and again["id"] == first["id"]
    # the study's cache is consulted first: nothing is timed
    cached, src = timing.measure(ARGS, BASE, timer=testing.StepTimer, scope=timing.new_scope(),
                                 cached=[first], **kw)
    assert src == "study" and cached["id"] == first["id"]
    # another study (scope) does not read this one's files
    other, src = timing.measure(ARGS, BASE, timer=testing.StepTimer, scope=timing.new_scope(),
                                **kw)
    assert src == "probed" and other["id"] != first["id"]
    with pytest.raises(AssertionError, match="probed although"):
        timing.measure(ARGS, BASE, timer=_MustNotRun, scope=timing.new_scope(), **kw)


def test_a_bad_scope_is_refused(tmp_path):
    with pytest.raises(ValueError, match="32 hex"):
        timing.measure(ARGS, BASE, token_budget=BUDGET, data=None, device="cpu",
                       timer=testing.StepTimer, scope="../x", cache_dir=tmp_path)


def test_step_timer_for_a_trainer():
    from trainers import train
    from trainers.loop import StepTimer

    assert timing.step_timer_for(train) is StepTimer
    assert timing.step_timer_for(testing.quick_train) is testing.StepTimer
    assert timing.step_timer_for(testing.slow_train) is testing.StepTimer  # a partial
    assert timing.step_timer_for(print) is StepTimer


# -- the lock, with real processes -------------------------------------------------------------

_HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from tuner.study.trial.cores import CoreLock
    base, mode, log, ready, hold = sys.argv[1:6]
    lock = CoreLock(Path(base))
    def say(word):
        with open(log, "a") as f:
            f.write(word + "\\n")
    if mode == "loop":  # steps until the stop file appears
        stop = Path(ready)
        while not stop.exists():
            with lock.shared():
                say("step " + hold)
                time.sleep(0.2)
        sys.exit(0)
    say(mode + "-wait")
    with (lock.exclusive() if mode == "probe" else lock.shared()):
        say(mode + "-start")
        Path(ready).touch()
        time.sleep(float(hold))
        say(mode + "-end")
""")


def _holder(tmp_path: Path, mode: str, ready: str, hold: str = "1.0") -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _HOLDER, str(tmp_path / "cores"), mode,
                             str(tmp_path / "log"), str(tmp_path / ready), hold])


def _wait_for(path: Path, proc: subprocess.Popen) -> None:
    wait_until(path.exists, what="the holder got in", gone=ended(proc, "the holder"))


def _log(tmp_path: Path, *, waits: bool = True) -> list[str]:
    lines = (tmp_path / "log").read_text().split("\n")[:-1]
    return lines if waits else [x for x in lines if not x.endswith("-wait")]


def test_a_step_cannot_run_while_a_probe_holds_the_cores(tmp_path):
    probe = _holder(tmp_path, "probe", "p")
    _wait_for(tmp_path / "p", probe)
    step = _holder(tmp_path, "step", "s", hold="0")
    assert probe.wait(120) == 0 and step.wait(120) == 0
    assert _log(tmp_path, waits=False) == ["probe-start", "probe-end", "step-start", "step-end"]


def test_a_probe_waits_for_the_steps_in_flight(tmp_path):
    step = _holder(tmp_path, "step", "s")
    _wait_for(tmp_path / "s", step)
    probe = _holder(tmp_path, "probe", "p", hold="0")
    assert step.wait(120) == 0 and probe.wait(120) == 0
    assert _log(tmp_path, waits=False) == ["step-start", "step-end", "probe-start", "probe-end"]


def test_steps_share_the_cores_and_a_waiting_probe_stops_new_ones(tmp_path):
    """Two trials whose steps overlap hold the lock shared without a gap; a probe still gets
    it (the turnstile), after at most the step each trial had started."""
    (tmp_path / "log").touch()
    loops = [_holder(tmp_path, "loop", "stop", hold=name) for name in ("a", "b")]
    wait_until(lambda: all(f"step {n}" in _log(tmp_path) for n in ("a", "b")),
               what="both trials step (shared: at once)")
    probe = _holder(tmp_path, "probe", "p", hold="0.5")
    assert probe.wait(120) == 0
    (tmp_path / "stop").touch()
    for p in loops:
        assert p.wait(120) == 0
    log = _log(tmp_path)
    during = log[log.index("probe-wait"):log.index("probe-start")]
    assert all(during.count(f"step {n}") <= 1 for n in ("a", "b"))
    held = log[log.index("probe-start"):log.index("probe-end")]
    assert held == ["probe-start"]  # no step while the probe held the cores


# -- through a study ---------------------------------------------------------------------------

TIMED_SPACE = {"params": {
    "lr": {"type": "float", "low": 1e-4, "high": 3e-2, "log": True},
    "batch_end": {"type": "categorical", "choices": [8, 16]}},
    "fixed": {"batch_schedule": "constant", "batch_start": 8}}
TOKENS = 64 * 128


def timed_spec(n: int):
    from tests.utils.specs import minimal_spec

    return minimal_spec("timed", study={"n_trials": n, "max_concurrent": 2, "sampler": "random"},
                        budget={"tokens_per_trial": TOKENS, "eval_every_tokens": TOKENS // 2},
                        objectives={"val_loss": "minimize", "timed_tokens_per_s": "maximize"},
                        space=TIMED_SPACE)


def test_a_study_times_each_signature_once_and_a_resume_reuses_it(ray_session, tmp_path):
    import optuna

    from tuner.study.run.runner import run_study
    from tuner.study.store import records

    def run(n: int, resume: bool) -> optuna.Study:
        s = run_study(timed_spec(n), run_dir=tmp_path / "timed", trainer=testing.quick_train,
                      progress=False, resume=resume)
        return optuna.load_study(study_name="timed", storage=s.storage)

    def check(study: optuna.Study) -> dict[str, set[str]]:
        ids: dict[str, set[str]] = {}
        for t in study.get_trials():
            entry = t.user_attrs[records.TIMING]
            recipe = Recipe.from_dict(t.user_attrs[records.RECIPE])
            steps = TOKENS // 128 // recipe.batch_end
            want = TOKENS / (steps * testing.step_seconds(recipe, recipe.batch_end))
            assert t.values[1] == pytest.approx(want) == entry["tokens_per_s"]
            own = t.user_attrs[records.METRICS]["tokens_per_s"]  # still there, a diagnostic
            assert own == pytest.approx(1e4 * (1 + recipe.warmup_fraction)) != t.values[1]
            assert entry["signature"] == sig_of(recipe, entry)
            ids.setdefault(entry["signature"], set()).add(entry["id"])
        stored = {k.removeprefix(records.TIMING_PREFIX): v["id"]
                  for k, v in study.user_attrs.items() if k.startswith(records.TIMING_PREFIX)}
        assert {s: {i} for s, i in stored.items()} == ids  # one timing per signature
        return ids

    first = run(6, resume=False)
    ids = check(first)
    probed = [t.user_attrs[records.TIMING]["source"] for t in first.get_trials()]
    assert probed.count("probed") == len(ids)  # the others: from the study or the machine file
    # the per-machine files were there for the trials, and are gone once the run ended
    scope_dir = Path(tempfile.gettempdir()) / timing.CACHE_DIR / first.user_attrs[
        records.TIMING_SCOPE]
    assert probed and not scope_dir.exists()
    again = run(10, resume=True)
    assert check(again).items() >= ids.items()
    for t in again.get_trials()[6:]:
        entry = t.user_attrs[records.TIMING]
        if entry["signature"] in ids:
            assert entry["source"] == "study"


def sig_of(recipe: Recipe, entry: dict) -> str:
    return timing.signature(timing.what_key(ARGS, recipe, TOKENS), timing.Where(**entry["where"]))


def test_a_trainer_without_the_step_gate_still_runs():
    from tuner.study.trial.cores import takes as _takes

    def old(model_args, recipe, *, token_budget, seed=None, on_eval=None):
        return None

    assert not _takes(old, "step_gate")
    assert _takes(testing.quick_train, "step_gate") and _takes(testing.nan_train, "step_gate")


def test_reports_show_a_timed_objective_with_its_spread():
    import pandas as pd

    from reports.ranked import objective_cell

    row = pd.Series({"objective.timed_tokens_per_s": 21000.0, "objective.val_loss": 2.5,
                     "timed_spread": 0.031})
    assert objective_cell(row, "objective.timed_tokens_per_s") == "2.1e+04 (spread 3.1%)"
    assert objective_cell(row, "objective.val_loss") == "2.5"
    assert objective_cell(row.drop("timed_spread"), "objective.timed_tokens_per_s") == "2.1e+04"


def test_every_training_moetune_runs_shares_the_cores_with_a_probe():
    # noise re-runs (and rerun, validate) pass the machine lock's step gate like trials do, so
    # a probe of another study pauses them too; a trainer without the keyword runs ungated
    import types

    from tuner.study.run import noise_retrain as noise
    from tuner.study.specs.spec import spec_from_dict
    from tuner.study.trial import cores

    seen = []

    def recording(model_args, recipe, **kwargs):
        seen.append(kwargs.get("step_gate"))
        return testing.quick_train(model_args, recipe, **kwargs)

    assert set(cores.gate_for(recording)) == {"step_gate"}
    assert cores.gate_for(lambda model_args, recipe, *, token_budget: None) == {}
    spec = spec_from_dict({"study": {"name": "gated", "n_trials": 1},
                           "budget": {"tokens_per_trial": 300, "eval_every_tokens": 100},
                           "space": {"params": {"lr": {"type": "float", "low": 1e-4,
                                                       "high": 1e-2}},
                                     "fixed": {"seq_len": 64}}})
    rec = types.SimpleNamespace(number=0, model_args_dict=dataclasses.asdict(ARGS),
                                recipe_dict=dataclasses.asdict(Recipe(seq_len=64)))
    run = noise.retrain_run(0, noise.training_of(rec, 1, spec), recording)
    assert run.get("error") is None and "val_loss" in run
    assert len(seen) == 1 and callable(seen[0])
