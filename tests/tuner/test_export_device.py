"""A systems knob chosen by timing the proxy on one device is not carried to another silently."""

from __future__ import annotations

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution

from trainers.config.model_args import ModelArgs
from trainers.config.recipe import Recipe
from trainers.presets import PUBLISHED_CONFIGS
from tuner.export import export_study
from tuner.export.pick import Pick
from tuner.modeling.full_run import FullRunTarget, load_target
from tuner.modeling.hardware import get_hardware
from tuner.study.store import records

PROXY = ModelArgs(dim=64, n_layers=2, n_heads=4, inter_dim=128, moe_inter_dim=16,
                  vocab_size=256, n_routed_experts=8, n_activated_experts=2, kv_lora_rank=32,
                  qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16)
# (val_loss, second objective, precision): fp32 is the faster on the CPU and the best loss
ROWS = [(2.0, 900.0, "fp32"), (2.1, 600.0, "bf16"), (2.3, 950.0, "fp32")]


def study_with(second: str, direction: str) -> optuna.Study:
    study = optuna.create_study(directions=["minimize", direction])
    study.set_user_attr(records.OBJECTIVES, [["val_loss", "minimize"], [second, direction]])
    for loss, value, precision in ROWS:
        metrics = {"val_loss": loss, second: value, "token_budget": 200_000}
        study.add_trial(optuna.trial.create_trial(
            values=[loss, value], params={"lr": 1e-3, "precision": precision},
            distributions={"lr": FloatDistribution(1e-4, 1e-2, log=True),
                           "precision": CategoricalDistribution(["fp32", "bf16"])},
            user_attrs={records.RECIPE: Recipe(lr=1e-3, precision=precision).to_dict(),
                        records.MODEL_ARGS: PROXY.to_dict(), records.METRICS: metrics,
                        records.OUTCOME: "complete", records.DEVICE: "cpu"}))
    return study


def target() -> FullRunTarget:
    args = load_target(str(PUBLISHED_CONFIGS / "config_16B.json"))[0]
    return FullRunTarget(model_args=args, name="16B", hardware=get_hardware("h800"), gpus=64,
                         tokens=10**12, seq_len=4096)


def test_a_precision_chosen_by_cpu_timing_is_announced_with_the_targets_costs():
    full, picked = export_study(study_with("timed_tokens_per_s", "maximize"),
                                Pick(kind="best-loss"), target())
    assert picked.record.params["precision"] == "fp32"
    said = [w for w in full.warnings if w.startswith("precision 'fp32' was chosen on")]
    assert len(said) == 1
    assert ("the proxy's speed timed on cpu: neither that device nor the proxy's GEMM shapes "
            "are the full run's on h800") in said[0]
    costs = dict(part.split() for part in said[0].split("the cost model gives ")[1]
                 .split(" GPU-hours")[0].split(", "))
    assert set(costs) == {"bf16", "fp32"}
    fp32, bf16 = (float(costs[k].rstrip("M")) for k in ("fp32", "bf16"))
    assert fp32 == pytest.approx(2 * bf16, rel=0.02)  # TF32 runs at half the bf16 peak
    assert fp32 * 1e6 == pytest.approx(full.cost["gpu_hours"], rel=0.01)


def test_a_study_ranked_on_the_modeled_cost_gets_no_such_warning():
    full, _ = export_study(study_with("full_gpu_hours", "minimize"), Pick(kind="best-loss"),
                           target())
    assert not [w for w in full.warnings if "was chosen on" in w]
