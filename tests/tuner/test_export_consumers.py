"""Every launch format against the rules its consumer enforces, pinned here as data.

The rules are the ones exports broke before, read from the consumers' code at the revisions the
formats name: NVIDIA/Megatron-LM@d98e8a64 (``validate_args``, ``TransformerConfig``,
``num_microbatches_calculator``), deepseek-ai/DeepSeek-V3@9b4e9788 (``inference/model.py``
``ModelArgs``), transformers (``DeepseekV2/V3ForCausalLM``, installed: instantiated and run),
torchtitan v0.2.2 for the legacy TOML (``train.py``, ``pipeline_parallel.py``) and torchtitan
0.3.0 for the config module (its own ``ConfigManager`` and model build, in a child process, when
installed). ``benchmarks/consumers/check_exports.py`` runs the consumers' own code on fetched
sources; these tests keep the same rules enforced without them.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import optuna
import pytest
import torch
from optuna.distributions import FloatDistribution

from trainers.config.model_args import ModelArgs
from trainers.config.recipe import Recipe
from tuner.app.cli import main
from tuner.export import formats
from tuner.export.formats import deepseek
from tuner.modeling.full_run import FullRunTarget, build_full_run, load_target
from tuner.modeling.hardware import get_hardware
from tuner.study.store import records

PROXY = ModelArgs(dim=64, n_layers=2, n_heads=4, inter_dim=128, moe_inter_dim=16,
                  vocab_size=256, n_routed_experts=8, n_activated_experts=2, kv_lora_rank=32,
                  qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, score_func="sigmoid",
                  n_expert_groups=2, n_limited_groups=1)

# deepseek-ai/DeepSeek-V3@9b4e9788e4a3a731f7567338ed15d3ec549ce03b inference/model.py ModelArgs:
# the only keys ModelArgs(**json.load(f)) accepts
DEEPSEEK_MODEL_ARGS = frozenset("""
max_batch_size max_seq_len dtype scale_fmt vocab_size dim inter_dim moe_inter_dim n_layers
n_dense_layers n_heads n_routed_experts n_shared_experts n_activated_experts n_expert_groups
n_limited_groups score_func route_scale q_lora_rank kv_lora_rank qk_nope_head_dim
qk_rope_head_dim v_head_dim original_seq_len rope_theta rope_factor beta_fast beta_slow mscale
""".split())
DEEPSEEK_DTYPES = ("bf16", "fp8")

# (target, GPUs, fixed degrees): the planner's choice and the layouts users pass
LAYOUTS = [("671B", 2048, {}), ("671B", 2048, {"tp": 1, "pp": 16, "ep": 64}),
           ("671B", 1024, {"pp": 8}), ("236B", 2048, {}), ("236B", 1024, {"pp": 16}),
           ("16B", 64, {}), ("16B", 64, {"pp": 4}), ("16B", 256, {"tp": 2, "pp": 8})]
RECIPES = [Recipe(precision="fp8", batch_schedule="linear"),
           Recipe(precision="bf16", batch_schedule="step", decay="wsd"),
           Recipe(precision="bf16", batch_schedule="constant", batch_start=32)]


def full_run(name: str, gpus: int, recipe: Recipe, **fixed):
    args, short = load_target(f"deepseek-v3-{name.lower()}")
    target = FullRunTarget(model_args=args, name=short, hardware=get_hardware("h800"),
                           gpus=gpus, tokens=int(14.8e12) if name == "671B" else 10**12,
                           seq_len=4096, **fixed)
    return build_full_run(recipe, PROXY, target, proxy_tokens=200_000,
                          proxy_info={"study": "s", "trial": 1})


# -- Megatron-LM ---------------------------------------------------------------------------------

def megatron_file(text: str) -> tuple[dict[str, list[str]], str]:
    """Flags as the launch line's word splitting gives them, and the launch line."""
    flags: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            flag, *values = line.split()
            flags[flag] = values
    launch = next(line for line in text.splitlines() if line.startswith("# launch:"))
    return flags, launch


def megatron_rejects(text: str, world: int) -> list[str]:
    """The Megatron-LM@d98e8a64 rules our exports broke or could break, as that code checks
    them (the message quotes or names the check)."""
    f, launch = megatron_file(text)
    one = {k: int(v[0]) for k, v in f.items() if len(v) == 1 and v[0].isdigit()}
    layers, pp, tp = one["--num-layers"], one["--pipeline-model-parallel-size"], \
        one["--tensor-model-parallel-size"]
    ep, heads, experts = one["--expert-model-parallel-size"], one["--num-attention-heads"], \
        one["--num-experts"]
    first, last = one.get("--decoder-first-pipeline-num-layers"), \
        one.get("--decoder-last-pipeline-num-layers")
    out = []
    if first is None and last is None and layers % pp:
        out.append("Number of layers should be divisible by the pipeline-model-parallel size")
    if first is not None or last is not None:
        middle, stages = layers - (first or 0) - (last or 0), pp - (first is not None) - (
            last is not None)
        if min(first or 1, last or 1) <= 0 or bool(middle) != bool(stages) or (
                stages and middle % stages):
            out.append("uneven pipeline: middle layers must divide over the middle stages")
    if "--step-batch-size-schedule" in f and "--global-batch-size" in f:
        out.append("Cannot specify both --step-batch-size-schedule and --global-batch-size")
    if "--rampup-batch-size" in f:
        out.append("rampup_batch_size is deprecated ... This argument is ignored")
    score = f["--moe-router-score-function"][0]
    if "--moe-router-enable-expert-bias" in f and score not in ("sigmoid", "sqrtsoftplus"):
        out.append("Expert bias for aux-loss-free routing only supports 'sigmoid'")
    if score == "softmax" and "--moe-router-pre-softmax" not in f:
        out.append("softmax router without --moe-router-pre-softmax is not DeepSeek's routing")
    if "--multi-latent-attention" in f and "--qk-layernorm" not in f:
        out.append("MLA without --qk-layernorm has no q/kv latent norms")
    if tp > 1 and "CUDA_DEVICE_MAX_CONNECTIONS=1" not in launch:
        out.append("tensor parallelism requires CUDA_DEVICE_MAX_CONNECTIONS=1 (validate_args)")
    if heads % tp:
        out.append("num_attention_heads must be a multiple of tensor_model_parallel_size")
    if experts % ep:
        out.append("Number of experts should be a multiple of expert model parallel_size")
    if world % (tp * pp) or world % (ep * pp):
        out.append("world size is not divisible by the model-parallel sizes")
    dp = world // (tp * pp)
    mb = one["--micro-batch-size"] * dp
    for entry in (f.get("--step-batch-size-schedule") or [""])[0].split(","):
        if entry and int(entry.split(":")[1]) % mb:
            out.append(f"current global batch size {entry} is not divisible by micro*dp")
    if "--global-batch-size" in f and one["--global-batch-size"] % mb:
        out.append("global batch size is not divisible by micro batch size times dp")
    return out


def test_the_rule_checker_catches_what_the_old_exports_did():
    old = "\n".join(["# launch: set -f; torchrun ... pretrain_gpt.py", "--num-layers 61",
                     "--num-attention-heads 128", "--num-experts 64",
                     "--multi-latent-attention", "--moe-router-score-function softmax",
                     "--moe-router-enable-expert-bias", "--micro-batch-size 1",
                     "--global-batch-size 7680", "--rampup-batch-size 2048 256 1000",
                     "--tensor-model-parallel-size 4", "--pipeline-model-parallel-size 2",
                     "--expert-model-parallel-size 128"])
    found = megatron_rejects(old, 2048)
    for rule in ("divisible by the pipeline", "deprecated", "only supports 'sigmoid'",
                 "pre-softmax", "--qk-layernorm", "CUDA_DEVICE_MAX_CONNECTIONS",
                 "multiple of expert model parallel_size"):
        assert any(rule in x for x in found), rule


@pytest.mark.parametrize("name, gpus, fixed", LAYOUTS)
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.batch_schedule)
def test_megatron_export_breaks_no_rule(name, gpus, fixed, recipe):
    run = full_run(name, gpus, recipe, **fixed)
    assert megatron_rejects(formats.render("megatron", run), gpus) == []


def test_megatron_softmax_target_routes_like_deepseek_and_says_what_it_drops():
    args = dataclasses.replace(load_target("deepseek-v3-16b")[0], gate_bias=True)
    target = FullRunTarget(model_args=args, name="16B", hardware=get_hardware("h800"), gpus=64,
                           tokens=10**12)
    text = formats.render("megatron", build_full_run(Recipe(), PROXY, target,
                                                     proxy_tokens=200_000))
    flags, _ = megatron_file(text)
    assert "--moe-router-pre-softmax" in flags and "--moe-router-enable-expert-bias" not in flags
    assert "# NOTE: the balancing bias" in text


# -- DeepSeek-V3's ModelArgs ---------------------------------------------------------------------

@pytest.mark.parametrize("name", ["16B", "236B", "671B"])
@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_deepseek_config_is_what_upstream_model_args_accepts(name, precision):
    run = full_run(name, 2048 if name != "16B" else 64, Recipe(precision=precision))
    d = json.loads(formats.render("deepseek", run))
    assert set(d) <= DEEPSEEK_MODEL_ARGS, sorted(set(d) - DEEPSEEK_MODEL_ARGS)
    assert d["max_seq_len"] == 4096 and d["max_seq_len"] <= d["original_seq_len"]  # no YaRN
    assert d["dtype"] == precision and d["dtype"] in DEEPSEEK_DTYPES
    side = deepseek.sidecar(run)
    assert set(side["training_only"]) == {"gate_bias", "mtp_depth", "init_std", "norm_eps",
                                          "mup_base_dim", "group_score"}
    assert side["warnings"] == run.warnings


def test_deepseek_long_run_raises_original_seq_len_instead_of_turning_on_yarn():
    args, _ = load_target("deepseek-v3-16b")
    target = FullRunTarget(model_args=args, name="16B", hardware=get_hardware("h200"), gpus=64,
                           tokens=10**12, seq_len=8192)
    run = build_full_run(Recipe(), PROXY, target, proxy_tokens=200_000)
    d = json.loads(formats.render("deepseek", run))
    assert d["max_seq_len"] == d["original_seq_len"] == 8192
    assert any("original_seq_len raised" in n for n in deepseek.notes(run))


# -- transformers --------------------------------------------------------------------------------

SHRINK = {"hidden_size": 64, "intermediate_size": 96, "moe_intermediate_size": 16,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
          "n_routed_experts": 16, "vocab_size": 128, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
          "qk_rope_head_dim": 4, "v_head_dim": 8}


@pytest.mark.parametrize("name, cls, normalised", [("16B", "DeepseekV2ForCausalLM", False),
                                                   ("236B", "DeepseekV2ForCausalLM", False),
                                                   ("671B", "DeepseekV3ForCausalLM", True)])
def test_hf_export_builds_the_router_it_names_and_runs(name, cls, normalised):
    transformers = pytest.importorskip("transformers")
    run = full_run(name, 2048 if name != "16B" else 64, Recipe())
    d = json.loads(formats.render("hf", run))
    assert d["architectures"] == [cls] and d["norm_topk_prob"] is normalised
    small = d | SHRINK | {"q_lora_rank": d["q_lora_rank"] and 24,
                          "n_group": min(d["n_group"], 4), "topk_group": min(d["topk_group"], 2)}
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.for_model(**small))
    assert type(model).__name__ == cls and model.config.norm_topk_prob is normalised
    torch.manual_seed(0)
    logits = model(torch.randint(0, 128, (2, 8))).logits
    assert logits.shape == (2, 8, 128) and torch.isfinite(logits).all()


# -- torchtitan ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name, gpus, fixed", LAYOUTS)
def test_torchtitan_toml_keeps_the_pipeline_busy(name, gpus, fixed):
    run = full_run(name, gpus, Recipe(), **fixed)
    doc = tomllib.loads(formats.render("torchtitan-toml", run))
    t, par = doc["training"], doc["parallelism"]
    dp = par["data_parallel_shard_degree"] * par["data_parallel_replicate_degree"]
    assert t["global_batch_size"] % (t["local_batch_size"] * dp) == 0  # train.py
    if par["pipeline_parallel_degree"] > 1:
        micro = par["pipeline_parallel_microbatch_size"]
        assert t["local_batch_size"] % micro == 0  # pipeline_parallel.py
        assert t["local_batch_size"] // micro >= par["pipeline_parallel_degree"]
    assert doc["model"]["flavor"] == name


def _torchtitan_03() -> None:
    try:
        version = importlib.metadata.version("torchtitan")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("torchtitan is not installed (.ci/run installs torchtitan==0.3.0)")
    if not version.startswith("0.3"):
        pytest.skip(f"torchtitan {version} installed; the config-module checks pin 0.3.x")


CHECK = Path(__file__).resolve().parents[2] / "benchmarks" / "consumers" / "check_exports.py"


TORCHTITAN_CASES = ["671B 2048 GPUs tp=1 pp=16 ep=64 linear-fp8",
                    "236B 2048 GPUs planner step-bf16", "16B 64 GPUs planner constant-bf16"]


def test_torchtitan_config_manager_loads_the_module_and_it_means_the_recipe():
    """torchtitan 0.3's own ConfigManager, model build (meta) and ParallelDims, in a child
    process: the check stands in for Triton and torchtitan's logging back ends, which must not
    leak into this one."""
    _torchtitan_03()
    only = [w for case in TORCHTITAN_CASES for w in ("--only", case)]
    out = subprocess.run([sys.executable, str(CHECK), "--torchtitan", "--no-hf", *only],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "3 of 3 checks passed" in out.stdout


def test_torchtitan_checks_fail_on_torchtitan_s_own_config():
    """The named checks bite: torchtitan's unmodified deepseek_v3_671b config is not the run
    (its LR, gamma 1e-3, norm eps 1e-5, warmup and steps are torchtitan's defaults)."""
    _torchtitan_03()
    code = (f"import sys; sys.path.insert(0, {str(CHECK.parent)!r}); import check_exports as ce; "
            "ce.stub_triton(); ce.stub_torchtitan_imports(); "
            "from torchtitan.models.deepseek_v3.config_registry import deepseek_v3_671b; "
            "case, run = ce.cases()[1]; "
            "print(sorted(k for k, ok in ce.torchtitan_checks(run, deepseek_v3_671b(), '')"
            ".items() if not ok))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    failed = out.stdout.strip().splitlines()[-1]
    for check in ("gamma", "norm_eps", "lr", "tokens", "warmup tokens", "layout"):
        assert f"'{check}'" in failed, (check, failed)


def test_torchtitan_module_names_its_launch_and_refuses_a_bad_module_name():
    run = full_run("671B", 2048, Recipe(), tp=1, pp=16, ep=64)
    text = formats.render("torchtitan", run, stem="run_671b")
    launch = next(line for line in text.splitlines() if "launch:" in line)
    assert "--module run_671b --config moetune_config" in launch
    assert "def moetune_config() -> Trainer.Config:" in text
    compile(text, "run_671b.py", "exec")  # valid Python
    rule = "must be a Python identifier (letters, digits, '_'), but got 'run-671b'"
    with pytest.raises(ValueError, match=re.escape(rule)):
        formats.render("torchtitan", run, stem="run-671b")


class _Slots:
    """A config dataclass with ``slots=True``, as torchtitan's: its fields hold defaults, and a
    field it lacks cannot be set."""
    __slots__: tuple[str, ...] = ()

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, -1)


class _Titan03Training(_Slots):
    """torchtitan 0.3.0's TrainingConfig batch fields."""
    __slots__ = ("local_batch_size", "global_batch_size", "seq_len")


class _TitanMainTraining(_Slots):
    """torchtitan main's (b5bcd76, torchtitan/config/configs.py): the batch in tokens."""
    __slots__ = ("num_tokens_per_microbatch_per_dp_rank", "num_tokens_per_train_step",
                 "max_context_length")


class _Titan03Parallelism(_Slots):
    __slots__ = ("pipeline_parallel_microbatch_size",)


class _TitanMainParallelism(_Slots):
    __slots__ = ("num_pp_microbatches",)


@pytest.mark.parametrize("name,gpus,fixed", [("671B", 2048, {"tp": 1, "pp": 16, "ep": 64}),
                                             ("16B", 64, {})])
def test_torchtitan_batch_lines_set_the_same_step_in_either_schema(name, gpus, fixed):
    """The module's batch lines run against both TrainingConfig schemas and set only fields
    each has; both describe the recipe's step: its final batch, its micro-batch per forward and,
    with a pipeline, the same microbatches per step. (The full module is checked by
    torchtitan's own ConfigManager above, for 0.3.0 here and main in benchmarks/RESULTS.md.)"""
    from types import SimpleNamespace

    from tuner.export.formats import torchtitan as tt_format
    run = full_run(name, gpus, Recipe(), **fixed)
    r, pp, code = run.recipe, run.plan.pp, "\n".join(tt_format._batch(run))
    old = SimpleNamespace(config=SimpleNamespace(training=_Titan03Training()),
                          par=_Titan03Parallelism())
    new = SimpleNamespace(config=SimpleNamespace(training=_TitanMainTraining()),
                          par=_TitanMainParallelism())
    for ns in (old, new):
        exec(code, vars(ns))  # noqa: S102 - our own generated lines
    t03, tmain = old.config.training, new.config.training
    assert t03.global_batch_size * t03.seq_len == tmain.num_tokens_per_train_step
    assert tmain.num_tokens_per_train_step == r.batch_end * r.seq_len
    assert t03.seq_len == tmain.max_context_length == r.seq_len
    if pp > 1:
        assert old.par.pipeline_parallel_microbatch_size * r.seq_len == (
            tmain.num_tokens_per_microbatch_per_dp_rank)
        assert t03.local_batch_size // old.par.pipeline_parallel_microbatch_size == (
            new.par.num_pp_microbatches) >= pp
    else:
        assert t03.local_batch_size * r.seq_len == tmain.num_tokens_per_microbatch_per_dp_rank
        assert new.par.num_pp_microbatches == -1  # left at its default: no pipeline


# -- the CLI: named targets, refusals naming the consumer's rule, warnings in the file -----------

def _study(tmp_path, lr: float = 1.9e-2) -> str:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    s = optuna.create_study(study_name="edge", storage=url, directions=["minimize"])
    s.set_user_attr(records.OBJECTIVES, [["val_loss", "minimize"]])
    dist = FloatDistribution(3e-4, 2e-2, log=True)
    for i, x in enumerate((lr, 2e-2, 1e-3)):
        s.add_trial(optuna.trial.create_trial(
            values=[2.0 + i], params={"lr": x}, distributions={"lr": dist},
            user_attrs={records.RECIPE: Recipe(lr=x).to_dict(),
                        records.MODEL_ARGS: PROXY.to_dict(),
                        records.METRICS: {"val_loss": 2.0 + i, "token_budget": 200_000}}))
    return url


@pytest.mark.parametrize("argv, rule", [
    (["--tp", "3"], "num_attention_heads (128) must be a multiple of tensor_model_parallel_size"),
    (["--pp", "64"], "every pipeline stage needs at least one of the n_layers=61 blocks"),
    (["--ep", "3"], "the number of experts (256) should be a multiple of "
                    "expert_model_parallel_size"),
])
def test_cli_refuses_a_layout_no_flag_can_make_valid(tmp_path, capsys, argv, rule):
    out = tmp_path / "run.args"
    rc = main(["export", "edge", "--storage", _study(tmp_path), "--target", "deepseek-v3-671b",
               "--gpus", "2048", "--tokens", "14.8e12", "--format", "megatron",
               "--out", str(out), *argv])
    err = capsys.readouterr().err
    assert rc == 2 and rule in err and "Megatron-LM@d98e8a64" in err
    assert not out.exists()


def test_cli_named_target_writes_warnings_to_stderr_and_file(tmp_path, capsys):
    out = tmp_path / "run.args"
    rc = main(["export", "edge", "--storage", _study(tmp_path), "--target", "deepseek-v3-671b",
               "--gpus", "2048", "--tokens", "14.8e12", "--format", "megatron",
               "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 0, err
    text = out.read_text()
    for kind in ("at the edge of its search range: lr",
                 "outside published practice: bias update speed gamma",
                 "not informed by the proxy: its tuned warmup"):
        assert f"warning: {kind}" in err and f"# WARNING: {kind}" in text, kind
    assert "(2 of 3 finished trials there)" in err
    assert re.search(r"--num-layers 61\n", text)


def test_cli_model_config_formats_write_a_sidecar(tmp_path, capsys):
    out = tmp_path / "config.json"
    rc = main(["export", "edge", "--storage", _study(tmp_path), "--target", "deepseek-v3-671b",
               "--gpus", "2048", "--tokens", "14.8e12", "--format", "deepseek",
               "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    side = json.loads((tmp_path / "config.deepseek.moetune.json").read_text())
    assert side["training_only"]["mtp_depth"] == 1 and side["warnings"]
    assert set(json.loads(out.read_text())) <= DEEPSEEK_MODEL_ARGS


# -- semantic drifts: said with their size where no flag expresses them -----------------------

def _236b(proxy: ModelArgs):
    args, short = load_target("deepseek-v3-236b")
    target = FullRunTarget(model_args=args, name=short, hardware=get_hardware("h800"),
                           gpus=2048, tokens=10**12)
    return build_full_run(Recipe(), proxy, target, proxy_tokens=200_000)


def test_236b_group_score_drift_is_sized_in_every_consumer_that_sums_top2():
    run = _236b(dataclasses.replace(PROXY, score_func="softmax", gate_bias=False))
    for fmt, consumer in (("megatron", "Megatron-LM"), ("torchtitan", "torchtitan 0.3")):
        text = formats.render(fmt, run)
        line = next(x for x in text.splitlines() if "group-limited routing" in x)
        assert consumer in line and "% of tokens pick a different expert set" in line
        assert 'group_score = "sum_top2"' in line
    assert not any("group-limited" in n for n in formats.NOTES["hf"](run))  # V2 scores by max


def test_a_proxy_tuned_with_sum_top2_exports_236b_without_the_drift():
    proxy = dataclasses.replace(PROXY, score_func="softmax", gate_bias=False,
                                group_score="sum_top2")
    run = _236b(proxy)
    assert run.model_args.group_rule == "sum_top2"  # the target keeps the proxy's rule
    assert "group-limited routing" not in formats.render("megatron", run)
    assert any("DeepseekV2ForCausalLM scores an expert group by its best score" in n
               for n in formats.NOTES["hf"](run))  # now HF is the one that differs


def test_multistep_says_how_far_cosine_is_from_it():
    run = full_run("671B", 2048, Recipe(decay="multistep", min_lr_ratio=0.01))
    for fmt in ("megatron", "torchtitan"):
        note = next(n for n in formats.NOTES[fmt](run) if "multistep" in n)
        gap = float(re.search(r"differs by up to (\d\.\d\d) x peak", note).group(1))
        # just before 80% of tokens multistep is still at peak, cosine well below it
        assert 0.5 < gap < 1.0, note
        assert "ends at 0.01 x peak instead of 0.1 x peak" in note, note


def test_fp8_megatron_states_the_transformer_engine_it_needs():
    text = formats.render("megatron", full_run("671B", 2048, Recipe(precision="fp8")))
    assert "# NOTE: --fp8-recipe blockwise needs Transformer Engine >= 2.3" in text


def test_megatron_says_where_the_batch_stops_changing():
    from tuner.export.formats import megatron
    run = full_run("671B", 2048, Recipe(batch_schedule="linear"))
    end = megatron.ramp_end_step(run)
    levels, seen, steps = megatron_batches_of(formats.render("megatron", run)), 0, 0
    while [b for s, b in levels if seen >= s][-1] != levels[-1][1]:
        seen += [b for s, b in levels if seen >= s][-1]
        steps += 1
    assert end == steps < run.steps.ramp
    assert f"reaches its final {run.recipe.batch_end} at step {end}" in formats.render(
        "megatron", run)


def megatron_batches_of(text: str) -> list[tuple[int, int]]:
    flags, _ = megatron_file(text)
    seq = int(flags["--seq-length"][0])
    return [(int(t) // seq, int(b)) for t, b in
            (x.split(":") for x in flags["--step-batch-size-schedule"][0].split(","))]


def test_hf_sidecar_says_what_the_model_config_leaves_out():
    for name in ("671B", "236B"):
        run = full_run(name, 2048, Recipe())
        side = formats.SIDECARS["hf"](run)
        assert any("MTP module" in n for n in side["notes"]), name
        assert any("a model config only" in n for n in side["notes"])
    d = json.loads(formats.render("hf", full_run("236B", 2048, Recipe())))
    assert "num_mtp_layers" not in d  # DeepseekV2Config has no such key


def test_the_consumer_checks_hold_the_drift_notes_to_account():
    """check_exports.py's named drift checks (run there after Megatron-LM's own parse): every
    case passes, and a file stripped of its notes fails the ones that apply."""
    sys.path.insert(0, str(CHECK.parent))
    import check_exports as ce
    seen = set()
    for case, run in ce.cases():
        text = formats.render("megatron", run)
        assert all(ce.megatron_checks(run, text).values()), case
        bare = "\n".join(x for x in text.splitlines() if not x.startswith("# NOTE"))
        seen |= {k for k, ok in ce.megatron_checks(run, bare).items() if not ok}
    assert seen == {"group score", "te version", "ramp end"}  # the cases have no multistep


def test_cli_torchtitan_module_is_named_by_its_file_and_notes_reach_stderr(tmp_path, capsys):
    url = _study(tmp_path)
    argv = ["export", "edge", "--storage", url, "--target", "deepseek-v3-236b", "--gpus", "2048",
            "--tokens", "1e12", "--format", "torchtitan"]
    bad = tmp_path / "run-236b.py"
    assert main([*argv, "--out", str(bad)]) == 2
    assert "must be a Python identifier" in capsys.readouterr().err and not bad.exists()
    out = tmp_path / "run_236b.py"
    assert main([*argv, "--out", str(out)]) == 0
    err, text = capsys.readouterr().err, out.read_text()
    assert "--module run_236b --config moetune_config" in text
    assert "moetune export: note: attention mask: torchtitan 0.3" in err
    assert "moetune export: note: group-limited routing: torchtitan 0.3" in err


def test_status_gives_the_range_to_tune_next_for_a_value_at_its_edge(tmp_path, capsys):
    assert main(["status", "edge", "--storage", _study(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "To check, on the recommended trial #0:" in out
    assert "lr = 0.019 sits at the top of [0.0003, 0.02]" in out
    assert "tune again with lr in [0.0003, 0.1633]" in out  # 0.02 * sqrt(0.02 / 3e-4)
