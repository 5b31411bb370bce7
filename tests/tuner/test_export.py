"""Export from a synthetic study: picks, scaling rules applied as stated, and the CLI."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import optuna
import pytest
from optuna.distributions import FloatDistribution

from trainers.config.model_args import ModelArgs
from trainers.config.recipe import Recipe
from trainers.presets import PUBLISHED_CONFIGS
from tuner.app.cli import main
from tuner.export import export_study
from tuner.export.pick import Pick, finished_trials, pick_trial
from tuner.modeling.anchor.answer import shipped_prior
from tuner.modeling.full_run import (
    ExportError,
    FullRunTarget,
    build_full_run,
    load_target,
    run_point,
)
from tuner.modeling.hardware import get_hardware
from tuner.study.results.ranking import knee, pareto_front
from tuner.study.results.trial_record import Objective
from tuner.study.store import records

CONFIGS = PUBLISHED_CONFIGS
PROXY = ModelArgs(dim=64, n_layers=2, n_heads=4, inter_dim=128, moe_inter_dim=16,
                  vocab_size=256, n_routed_experts=8, n_activated_experts=2, kv_lora_rank=32,
                  qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16)
OBJECTIVES = [["val_loss", "minimize"], ["tokens_per_s", "maximize"]]
# (val_loss, tokens_per_s, lr, feasible, proxy peak GiB)
TRIALS = [(2.00, 100.0, 1e-3, True, 3.0),
          (2.10, 200.0, 2e-3, True, 1.0),
          (2.50, 300.0, 3e-3, True, 1.0),
          (3.00, 310.0, 4e-3, True, 1.0),
          (1.90, 50.0, 5e-3, False, 1.0),   # best loss but infeasible
          (2.60, 150.0, 6e-3, True, 1.0)]   # dominated


def add_trials(study: optuna.Study, rows=TRIALS) -> None:
    study.set_user_attr(records.OBJECTIVES, OBJECTIVES)
    study.set_user_attr(records.CONSTRAINTS, {"max_peak_memory_gb": 4.0})
    for loss, tps, lr, feasible, gib in rows:
        recipe = Recipe(lr=lr, precision="bf16")
        metrics = {"val_loss": loss, "tokens_per_s": tps, "token_budget": 200_000,
                   "peak_memory_bytes": int(gib * 2**30)}
        study.add_trial(optuna.trial.create_trial(
            values=[loss, tps], params={"lr": lr},
            distributions={"lr": FloatDistribution(1e-4, 1e-2, log=True)},
            user_attrs={records.RECIPE: recipe.to_dict(), records.MODEL_ARGS: PROXY.to_dict(),
                        records.METRICS: metrics,
                        records.OUTCOME: "complete" if feasible else "infeasible"},
            constraints={"diverged": -1.0 if feasible else 1.0}))


@pytest.fixture
def study() -> optuna.Study:
    s = optuna.create_study(study_name="synthetic", directions=["minimize", "maximize"])
    add_trials(s)
    return s


def config(name: str) -> ModelArgs:
    return load_target(str(CONFIGS / f"config_{name}.json"))[0]


def target(**kw) -> FullRunTarget:
    base = dict(model_args=config("16B"), name="16B", hardware=get_hardware("h800"), gpus=64,
                tokens=10**12, seq_len=4096)
    return FullRunTarget(**(base | kw))


def test_best_loss_skips_infeasible_trials(study):
    assert pick_trial(study, Pick(kind="best-loss")).record.number == 0


def test_memory_limit_filters_by_measured_proxy_peak(study):
    assert pick_trial(study, Pick(kind="best-loss", max_memory_gb=2.0)).record.number == 1


def test_knee_is_the_point_farthest_below_the_extremes_line(study):
    # normalised front (loss, -tokens/s): t0 (0, 1), t1 (0.1, 0.524), t2 (0.5, 0.048), t3 (1, 0)
    # distance below x + y = 1: t1 0.376/√2, t2 0.452/√2 -> t2
    assert pick_trial(study, Pick(kind="knee")).record.number == 2
    assert pick_trial(study, Pick(kind="knee", min_tokens_per_s=305)).record.number == 3


def test_pareto_front_excludes_dominated_trials(study):
    feasible = [r for r in finished_trials(study) if r.feasible]
    front = pareto_front(feasible, [Objective(name=n, direction=d) for n, d in OBJECTIVES])
    assert sorted(r.number for r in front) == [0, 1, 2, 3]


def test_knee_of_a_two_point_front_is_the_one_nearest_the_ideal():
    s = optuna.create_study(directions=["minimize", "maximize"])
    add_trials(s, [(2.0, 100.0, 1e-3, True, 1.0), (2.1, 110.0, 2e-3, True, 1.0)])
    front = finished_trials(s)
    objectives = [Objective(name=n, direction=d) for n, d in OBJECTIVES]
    assert knee(front, objectives).number == 0  # both at distance 1: first


def test_trial_pick_flags_an_infeasible_trial_and_rejects_unknown_numbers(study):
    assert "INFEASIBLE" in pick_trial(study, Pick(kind="trial", trial=4)).how
    with pytest.raises(LookupError, match=r"trial 99: not a finished trial.*\[0, 1, 2"):
        pick_trial(study, Pick(kind="trial", trial=99))


def test_no_candidate_left_says_why(study):
    with pytest.raises(LookupError, match="6 finished, 5 feasible"):
        pick_trial(study, Pick(kind="knee", max_memory_gb=0.5))


def test_rules_are_applied_as_stated(study):
    t = target()
    full, picked = export_study(study, Pick(kind="best-loss"), t)
    proxy = picked.record.recipe
    # batch: the published recipes' prior at the full run, in sequences, a multiple of dp;
    # ramp shape 8/32 kept
    prior = shipped_prior()
    point = run_point(full.model_args, t)
    dp = full.plan.dp
    assert full.recipe.batch_end == dp * round(prior.read_batch(point).value / 4096 / dp)
    # LR: no law, so the prior's at the written batch, not the proxy's LR moved by an exponent
    at_batch = dataclasses.replace(point, batch=float(full.recipe.batch_end * 4096))
    assert full.recipe.lr == pytest.approx(prior.read_lr(at_batch).value)
    assert full.answer is not None and full.answer.law is None
    assert full.recipe.lr != pytest.approx(proxy.lr, rel=0.5)
    assert full.recipe.batch_start == dp * round(full.recipe.batch_end / 4 / dp)
    # fractions carried, precision carried, checkpoint ratio chosen by the memory model
    for name in ("batch_ramp_fraction", "min_lr_ratio", "decay", "precision", "weight_decay"):
        assert getattr(full.recipe, name) == getattr(proxy, name)
    # gamma keeps its ratio to the LR; warmup: the proxy's 2 tuned steps (5% of 49) cannot
    # inform it, so the published 2000 steps, and the export says so
    assert full.recipe.bias_update_speed == pytest.approx(
        proxy.bias_update_speed * full.recipe.lr / proxy.lr)
    assert full.steps.warmup == 2000
    assert any(w.startswith("not informed by the proxy: its tuned warmup") for w in full.warnings)
    rules = {r.field: r for r in full.rules}
    assert set(rules) == {f.name for f in dataclasses.fields(Recipe)}
    assert rules["checkpoint_ratio"].kind == "chosen"
    assert full.cost["peak_memory_gib"]["total"] <= 0.9 * t.hardware.memory_gib
    assert full.cost["label"] == "modeled"


def test_mup_study_keeps_the_lr_and_the_base_width():
    s = optuna.create_study(directions=["minimize", "maximize"])
    mup = dataclasses.replace(PROXY, mup_base_dim=32)
    s.add_trial(optuna.trial.create_trial(
        values=[2.0, 1.0], user_attrs={records.RECIPE: Recipe(lr=4e-3).to_dict(),
                                       records.MODEL_ARGS: mup.to_dict(),
                                       records.METRICS: {"token_budget": 1000}}))
    full, _ = export_study(s, Pick(kind="trial", trial=0), target())
    # the base width is kept, so the multipliers carry over; the LR is the anchored answer's
    # at the full run (muP carries an LR across width, not across tokens and batch): the
    # prior's single LR is what the hidden matrices get, the base LR that times width_mult
    assert full.model_args.mup_base_dim == 32
    assert full.answer is not None
    assert full.hidden_lr == pytest.approx(full.answer.prior.value)
    assert full.recipe.lr == pytest.approx(full.hidden_lr * 2048 / 32)
    rule = next(r.rule for r in full.rules if r.field == "lr")
    assert "muP" in rule and "4e-3" not in rule and "0.004" in rule  # the proxy's LR, named


def test_fp8_on_a100_is_refused():
    s = optuna.create_study(directions=["minimize", "maximize"])
    rec = finished_trials_from(s, Recipe(precision="fp8"))
    with pytest.raises(ExportError, match="--hardware: .*a100.* no fp8"):
        build_full_run(rec.recipe, rec.model_args, target(hardware=get_hardware("a100")),
                       proxy_tokens=rec.token_budget)


def finished_trials_from(s: optuna.Study, recipe: Recipe):
    s.set_user_attr(records.OBJECTIVES, OBJECTIVES)
    s.add_trial(optuna.trial.create_trial(
        values=[2.0, 1.0], user_attrs={records.RECIPE: recipe.to_dict(),
                                       records.MODEL_ARGS: PROXY.to_dict(),
                                       records.METRICS: {"token_budget": 1000}}))
    return finished_trials(s)[0]


def test_too_few_gpus_proposes_more():
    s = optuna.create_study(directions=["minimize", "maximize"])
    rec = finished_trials_from(s, Recipe())
    with pytest.raises(ExportError, match=r"no parallel layout of 8 x h800.*GPUs would fit"):
        build_full_run(rec.recipe, rec.model_args,
                       target(model_args=config("671B"), name="671B", gpus=8),
                       proxy_tokens=rec.token_budget)


def _sqlite_study(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    s = optuna.create_study(study_name="synthetic", storage=url,
                            directions=["minimize", "maximize"])
    add_trials(s)
    return url


def test_cli_writes_the_chosen_format(tmp_path, capsys):
    url = _sqlite_study(tmp_path)
    out = tmp_path / "full.json"
    rc = main(["export", "synthetic", "--storage", url, "--pick", "knee",
               "--target", str(CONFIGS / "config_16B.json"), "--gpus", "64",
               "--tokens", "1e12", "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    native = json.loads(out.read_text())
    assert native["proxy"]["trial"] == 2 and native["target"]["gpus"] == 64
    assert {r["field"] for r in native["rules"]} >= {"lr", "batch_end", "checkpoint_ratio"}
    assert "knee" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--hardware", "v100"], "unknown name 'v100'; valid names are"),
    (["--format", "yaml"], "unknown name 'yaml'; valid formats are"),
    (["--pick", "trial", "x"], "'trial' takes one trial number"),
    (["--tokens", "0"], "--tokens: must be a positive whole number, but got --tokens 0.0."),
    (["--tokens", "nan"], "--tokens: must be a positive whole number, but got --tokens nan."),
    (["--gpus", "0"], "--gpus: must be a positive integer, but got --gpus 0."),
    (["--tp", "0"], "--tp: must be a positive integer, but got --tp 0."),
    (["--pp", "-2"], "--pp: must be a positive integer, but got --pp -2."),
    (["--ep", "0"], "--ep: must be a positive integer, but got --ep 0."),
    (["--global-batch", "0"], "--global-batch: must be a positive integer, but got"),
    (["--seq-len", "0"], "--seq-len: must be a positive integer, but got --seq-len 0."),
    (["--micro-batch", "0"], "--micro-batch: must be a positive integer, but got"),
    (["--memory-fraction", "1.5"], "--memory-fraction: must be in (0, 1], but got"),
    (["--mfu", "0"], "--mfu: must be in (0, 1], but got --mfu 0.0."),
    # sizes no run has: the planner would search layouts for minutes, the arithmetic overflow
    (["--tokens", "1e300"], "--tokens: must be at most 1e+16, but got --tokens 1e+300."),
    (["--gpus", "100000000000"], "--gpus: must be at most 1048576, but got --gpus 100000000000."),
    (["--seq-len", "2000000"], "--seq-len: must be at most 1048576, but got --seq-len 2000000."),
    (["--max-memory-gb", "-1"], "--max-memory-gb: must be positive, but got"),
    (["--min-tokens-per-s", "nan"], "--min-tokens-per-s: must be at least 0, but got"),
    (["--lr", "0"], "--lr: must be a positive number, but got --lr 0.0."),
    (["--lr", "inf"], "--lr: must be a positive number, but got --lr inf."),
    # a degree no layout of 64 GPUs can have is a broken rule, not a memory problem
    (["--tp", "3"], "--tp 3: the world size 64 must be divisible by tp*pp (Megatron-LM@d98e8a64"),
    # 16B on 64 GPUs plans dp=64: fewer sequences than data-parallel ranks cannot be trained
    (["--global-batch", "7"], "--global-batch: must be at least dp*micro_batch = 64*1 = 64 "
                              "sequences"),
    (["--target", "{tmp}"], "--target: must be a config JSON file, a published config"),
])
def test_cli_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, argv, message):
    url = _sqlite_study(tmp_path)
    if message.startswith("--target"):
        argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    out = tmp_path / "full.json"
    base = ["export", "synthetic", "--storage", url, "--target",
            str(CONFIGS / "config_16B.json"), "--gpus", "64", "--tokens", "1e12",
            "--out", str(out)]
    assert main(base + argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize("out, message", [
    ("folder", "--out: must be a writable file path, but got --out '{p}', a folder."),
    ("a_file/full.json", "--out: must be a writable file path, but got --out '{p}': "
                         "'{t}/a_file' is not a folder."),
])
def test_cli_unwritable_out_exits_2_and_writes_nothing(tmp_path, capsys, out, message):
    url = _sqlite_study(tmp_path)
    (tmp_path / "folder").mkdir()
    (tmp_path / "a_file").write_text("kept")
    path = tmp_path / out
    before = sorted(tmp_path.rglob("*"))
    rc = main(["export", "synthetic", "--storage", url, "--target",
               str(CONFIGS / "config_16B.json"), "--gpus", "64", "--tokens", "1e12",
               "--out", str(path)])
    assert rc == 2
    assert message.format(p=path, t=tmp_path) in capsys.readouterr().err
    assert sorted(tmp_path.rglob("*")) == before and (tmp_path / "a_file").read_text() == "kept"


def test_cli_lr_is_written_as_the_users(tmp_path, capsys):
    url = _sqlite_study(tmp_path)
    out = tmp_path / "full.json"
    rc = main(["export", "synthetic", "--storage", url, "--target",
               str(CONFIGS / "config_16B.json"), "--gpus", "64", "--tokens", "1e12",
               "--lr", "4.2e-4", "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    native = json.loads(out.read_text())
    assert native["lr"]["lr"] == 4.2e-4 and native["lr"]["source"] == "user"


def test_cli_rounded_global_batch_is_applied_with_a_warning(tmp_path, capsys):
    url = _sqlite_study(tmp_path)
    out = tmp_path / "full.json"
    rc = main(["export", "synthetic", "--storage", url, "--pick", "knee", "--target",
               str(CONFIGS / "config_16B.json"), "--gpus", "64", "--tokens", "1e12",
               "--global-batch", "100", "--out", str(out)])
    assert rc == 0
    err = capsys.readouterr().err
    assert ("warning: --global-batch 100 rounded to 128: the global batch must be a multiple "
            "of dp*micro_batch = 64*1 = 64.") in err
    # the tuned ramp 8 -> 32 keeps 1/4 of 128 = 32 sequences, which rounds up to 64
    native = json.loads(out.read_text())
    assert native["recipe"]["batch_start"] == 64 and native["recipe"]["batch_end"] == 128
    start_rule = next(r["rule"] for r in native["rules"] if r["field"] == "batch_start")
    assert start_rule.startswith("ramp shape kept") and "(0.5 of it)" in start_rule


def test_global_batch_on_a_plain_study_moves_the_lr_with_it(study):
    """--global-batch on a study without a law: the LR written is the anchored answer at that
    batch (the published recipes' coupling in B), labelled for it, not the LR of another batch
    relabelled."""
    small, _ = export_study(study, Pick(kind="knee"), target(global_batch=512))
    large, _ = export_study(study, Pick(kind="knee"), target(global_batch=4096))
    for full in (small, large):
        assert full.answer is not None
        assert full.answer.batch == full.recipe.batch_end * full.recipe.seq_len
        assert full.recipe.lr == pytest.approx(full.answer.lr)
    assert small.recipe.lr != pytest.approx(large.recipe.lr, rel=0.05)
    assert f"for the final batch, 4096 x 4096 = {4096 * 4096:,} tokens per step" in \
        large.lr_line()


def test_ramp_that_rounds_to_its_end_is_reported_as_constant(study):
    full, _ = export_study(study, Pick(kind="knee"), target(global_batch=64))
    assert full.recipe.batch_start == full.recipe.batch_end == 64
    start_rule = next(r.rule for r in full.rules if r.field == "batch_start")
    assert start_rule.startswith("ramp collapsed") and "ramp shape kept" not in start_rule
    assert any("collapsed to a constant batch of 64" in w for w in full.warnings)
    assert full.to_dict()["schedule"]["batch"] == "constant global batch 64 sequences"


def test_cli_unknown_study_exits_2(tmp_path, capsys):
    url = _sqlite_study(tmp_path)
    rc = main(["export", "nope", "--storage", url, "--target",
               str(CONFIGS / "config_16B.json"), "--gpus", "64", "--tokens", "1e12"])
    assert rc == 2 and "no study named 'nope'" in capsys.readouterr().err


def test_full_run_metrics_are_registered_and_trade_precision_for_cost():
    import dataclasses
    from types import SimpleNamespace

    from tuner.study.specs.metrics import MetricContext, get_metric
    from tuner.study.specs.spec import parse_spec

    hours, mem = get_metric("full_gpu_hours"), get_metric("full_peak_memory_gb")
    assert hours.label == mem.label == "modeled"
    spec = parse_spec({"study": {"name": "m"}, "model": {"full": str(CONFIGS / "config_16B.json")},
                       "space": {"params": {"lr": {"type": "float", "low": 1e-4, "high": 1e-2}},
                                 "fixed": {"seq_len": 64}}})
    result = SimpleNamespace(token_budget=200_000)

    def ctx(precision: str) -> MetricContext:
        return MetricContext(spec=spec, recipe=Recipe(precision=precision), model_args=PROXY)

    # default full run (2048 x h800, 14.8T tokens): fp8 runs the block matmuls at twice the rate
    assert hours.fn(result, ctx("fp8")) < hours.fn(result, ctx("bf16"))
    assert 0 < mem.fn(result, ctx("bf16")) <= 0.9 * get_hardware("h800").memory_gib
    no_target = dataclasses.replace(spec, model=dataclasses.replace(spec.model, full="",
                                                                    preset="debug"))
    with pytest.raises(ValueError, match=r"need \[model\] full"):
        hours.fn(result, MetricContext(spec=no_target, recipe=Recipe(), model_args=PROXY))
