"""`moetune validate`: the top recipes re-trained on a wider proxy, ranking compared and stored."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pytest

from trainers.config.model_args import ModelArgs
from trainers.config.recipe import Recipe
from tuner.app.cli import main
from tuner.export import export_study
from tuner.export.pick import Pick
from tuner.modeling.full_run import FullRunTarget
from tuner.modeling.hardware import get_hardware
from tuner.study.specs.spec import load_spec
from tuner.study.store import records
from tuner.study.workflows.validate import spearman, validate_study, widen
from tuner.testing import make_result

SPEC = Path(__file__).resolve().parents[2] / "search_spaces" / "quickstart.toml"
PROXY = ModelArgs(dim=64, n_layers=2, n_heads=4, inter_dim=128, moe_inter_dim=16,
                  vocab_size=256, n_routed_experts=8, n_activated_experts=2, kv_lora_rank=32,
                  qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16)
# (proxy val_loss, lr, feasible): the best feasible three are trials 0, 1, 2 (lr 1e-3, 2e-3, 3e-3)
TRIALS = [(2.0, 1e-3, True), (2.1, 2e-3, True), (2.5, 3e-3, True), (1.9, 5e-3, False),
          (3.0, 4e-3, True)]


def keeps_order(model_args, recipe, *, token_budget, **_):
    # loss falls with width; recipes keep the order of their (proxy) lr: smaller lr is better
    return make_result(recipe, token_budget=token_budget,
                       val_loss=1.0 + 100.0 / model_args.dim + 100 * recipe.lr)


def flips_order(model_args, recipe, *, token_budget, **_):
    return make_result(recipe, token_budget=token_budget, val_loss=2.0 - 100 * recipe.lr)


def make_study(tmp_path: Path | None = None) -> optuna.Study:
    storage = f"sqlite:///{tmp_path / 'study.db'}" if tmp_path else None
    s = optuna.create_study(study_name="synthetic", storage=storage,
                            directions=["minimize", "maximize"])
    s.set_user_attr(records.SPEC, load_spec(SPEC).to_dict())
    s.set_user_attr(records.OBJECTIVES, [["val_loss", "minimize"], ["tokens_per_s", "maximize"]])
    for loss, lr, feasible in TRIALS:
        s.add_trial(optuna.trial.create_trial(
            values=[loss, 100.0],
            user_attrs={records.RECIPE: Recipe(lr=lr).to_dict(),
                        records.MODEL_ARGS: PROXY.to_dict(),
                        records.METRICS: {"val_loss": loss, "token_budget": 300_000}},
            constraints={"diverged": -1.0 if feasible else 1.0}))
    return s


def test_spearman_on_hand_cases():
    assert spearman([1, 2, 3], [10, 20, 30]) == 1.0
    assert spearman([1, 2, 3], [3, 2, 1]) == -1.0
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)  # 1 - 6*2/(4*15)
    assert math.isnan(spearman([1, 1], [1, 2]))


def test_widen_doubles_width_at_the_same_depth():
    big = widen(PROXY, 2)
    assert (big.dim, big.n_layers, big.inter_dim) == (128, PROXY.n_layers, 2 * PROXY.inter_dim)


def test_kept_ranking_is_recorded_and_export_carries_it():
    s = make_study()
    out = validate_study(s, top=3, scale=2, trainer=keeps_order)
    assert [r["trial"] for r in out["rows"]] == [0, 1, 2]  # best feasible by val_loss
    assert out["spearman"] == 1.0 and out["chosen_stays_on_top"]
    assert s.user_attrs[records.VALIDATION]["spearman"] == 1.0
    t = FullRunTarget(model_args=PROXY, name="proxy", hardware=get_hardware("h100"), gpus=8,
                      tokens=10**9)
    full, _ = export_study(s, Pick(kind="best-loss"), t)
    assert full.to_dict()["proxy"]["validation"]["chosen_trial"] == 0
    assert not any("transfer check" in w for w in full.warnings)


def test_flipped_ranking_warns_at_export():
    s = make_study()
    out = validate_study(s, top=3, scale=2, trainer=flips_order)
    assert out["spearman"] == -1.0 and not out["chosen_stays_on_top"]
    assert out["best_at_scale"] == 2
    t = FullRunTarget(model_args=PROXY, name="proxy", hardware=get_hardware("h100"), gpus=8,
                      tokens=10**9)
    full, _ = export_study(s, Pick(kind="best-loss"), t)
    assert any("did not stay on top" in w for w in full.warnings)


def test_lr_moves_by_the_compute_law_for_the_wider_proxy():
    s = make_study()
    out = validate_study(s, top=2, scale=2, trainer=keeps_order, record=False)
    assert all(r["lr"] < lr for r, lr in zip(out["rows"], (1e-3, 2e-3), strict=True))
    assert records.VALIDATION not in s.user_attrs


def test_cli_validate(tmp_path, capsys):
    make_study(tmp_path)
    rc = main(["validate", "synthetic", "--storage", f"sqlite:///{tmp_path / 'study.db'}",
               "--root", str(tmp_path), "--top", "3", "--trainer", "tuner.testing:quick_train"])
    assert rc == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "Spearman rank correlation" in out
    assert "over 3 recipes the rank correlation can take only a few values" in out
    stored = optuna.load_study(study_name="synthetic",
                               storage=f"sqlite:///{tmp_path / 'study.db'}")
    assert stored.user_attrs[records.VALIDATION]["top"] == 3
    assert main(["validate", "synthetic", "--storage", f"sqlite:///{tmp_path / 'study.db'}",
                 "--top", "1"]) == 2
    assert "--top: must be >= 2" in capsys.readouterr().err

