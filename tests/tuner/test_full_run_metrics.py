"""A study can trade proxy loss against the modeled cost of the full run it stands for."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from trainers import ModelArgs, Recipe
from tuner import records, testing
from tuner.export import full_gpu_hours, target_from_spec
from tuner.spec import SpecError, spec_from_dict
from tuner.study_runner import run_study

SHARED = Path(__file__).resolve().parents[3] / "shared"
CONFIG = SHARED / "reference" / "deepseek_v3_configs" / "config_671B.json"
SPACE = {"params": {"precision": {"type": "categorical", "choices": ["bf16", "fp8"]}},
         "fixed": {"seq_len": 64}}


def spec(**model):
    return spec_from_dict({
        "study": {"name": "full", "n_trials": 3, "max_concurrent": 1},
        "model": model,
        "budget": {"tokens_per_trial": 300, "eval_every_tokens": 100},
        "objectives": {"val_loss": "minimize", "full_gpu_hours": "minimize"},
        "constraints": {"max_full_peak_memory_gb": 1000.0},
        "pruning": {"scheduler": "none"},
        "space": SPACE,
    })


def test_full_metrics_need_a_full_config():
    with pytest.raises(SpecError, match=r"objectives.full_gpu_hours: needs \[model\] full"):
        spec(preset="debug")


def test_study_records_modeled_full_run_cost(ray_session, tmp_path):
    if not CONFIG.exists():
        pytest.skip(f"{CONFIG} not present")
    s = spec(full=str(CONFIG), proxy="debug")
    summary = run_study(s, run_dir=tmp_path / s.name, trainer=testing.quick_train,
                        progress=False)
    study = optuna.load_study(study_name=s.name, storage=summary.storage)
    done = [t for t in study.trials if t.values]
    assert done
    for t in done:
        recipe = Recipe.from_dict(t.user_attrs[records.RECIPE])
        proxy = ModelArgs.from_dict(t.user_attrs[records.MODEL_ARGS])
        want = full_gpu_hours(recipe, proxy, target_from_spec(s), token_budget=256)
        assert t.values[1] == pytest.approx(want)
        assert 1e5 < t.values[1] < 1e8  # the 671B run: millions of GPU-hours, not a placeholder
