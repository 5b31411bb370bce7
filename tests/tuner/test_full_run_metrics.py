"""A study can trade proxy loss against the modeled cost of the full run it stands for."""

from __future__ import annotations

import optuna
import pytest

from tests.utils.specs import minimal_spec
from trainers import ModelArgs, Recipe
from trainers.presets import PUBLISHED_CONFIGS
from tuner import testing
from tuner.modeling.full_run import modeled_cost, target_of
from tuner.study.run.runner import run_study
from tuner.study.specs.spec import SpecError
from tuner.study.store import records

CONFIG = PUBLISHED_CONFIGS / "config_671B.json"
SPACE = {"params": {"precision": {"type": "categorical", "choices": ["bf16", "fp8"]}},
         "fixed": {"seq_len": 64}}


def spec(**model):
    return minimal_spec("full", study={"n_trials": 3}, model=model, space=SPACE,
                        objectives={"val_loss": "minimize", "full_gpu_hours": "minimize"},
                        constraints={"max_full_peak_memory_gb": 1000.0})


def test_full_metrics_need_a_full_config():
    with pytest.raises(SpecError, match=r"objectives.full_gpu_hours: needs \[model\] full"):
        spec(preset="debug")


def test_study_records_modeled_full_run_cost(ray_session, tmp_path):
    s = spec(full=str(CONFIG), proxy="debug")
    summary = run_study(s, run_dir=tmp_path / s.name, trainer=testing.quick_train,
                        progress=False)
    study = optuna.load_study(study_name=s.name, storage=summary.storage)
    done = [t for t in study.trials if t.values]
    assert done
    for t in done:
        recipe = Recipe.from_dict(t.user_attrs[records.RECIPE])
        proxy = ModelArgs.from_dict(t.user_attrs[records.MODEL_ARGS])
        f = s.full_run
        target = target_of(str(CONFIG), f.hardware, f.gpus, f.tokens, f.seq_len)
        want = modeled_cost(recipe, proxy, target, 256)[1]
        assert t.values[1] == pytest.approx(want)
        assert 1e5 < t.values[1] < 1e8  # the 671B run: millions of GPU-hours, not a placeholder
