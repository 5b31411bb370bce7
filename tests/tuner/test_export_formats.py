"""Each export format round-trips through the tool that reads it."""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib
from pathlib import Path

import pytest

from trainers.config.model_args import ModelArgs
from trainers.config.recipe import Recipe
from trainers.presets import PUBLISHED_CONFIGS
from tuner.export import formats
from tuner.export.formats import deepseek, hf, megatron, torchtitan, torchtitan_toml
from tuner.modeling.full_run import FullRunTarget, build_full_run, load_target
from tuner.modeling.hardware import get_hardware

CONFIGS = PUBLISHED_CONFIGS
PROXY = ModelArgs(dim=64, n_layers=2, n_heads=4, inter_dim=128, moe_inter_dim=16,
                  vocab_size=256, n_routed_experts=8, n_activated_experts=2, kv_lora_rank=32,
                  qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16)

# Every flag the Megatron export may emit. Checked one by one against NVIDIA/Megatron-LM@d98e8a64
# (2026-08-22): megatron/training/arguments.py and the config dataclasses its
# ArgumentGroupFactory turns into flags (TransformerConfig, ModelParallelConfig, TrainingConfig,
# SchedulerConfig), including argparse_meta renames (--fp8-format, --norm-epsilon,
# --disable-bias-linear); benchmarks/consumers/check_exports.py runs parse_args, validate_args
# and core_transformer_config_from_args on the exports. Adding a flag to the export means
# checking it there and adding it here.
MEGATRON_FLAGS = frozenset("""
--num-layers --hidden-size --ffn-hidden-size --num-attention-heads --seq-length
--max-position-embeddings --vocab-size --normalization --norm-epsilon --swiglu
--disable-bias-linear --untie-embeddings-and-output-weights --position-embedding-type
--rotary-base --init-method-std --multi-latent-attention --q-lora-rank --kv-lora-rank
--qk-head-dim --qk-pos-emb-head-dim --v-head-dim --num-experts --moe-layer-freq
--moe-ffn-hidden-size --moe-router-topk --moe-router-score-function
--moe-router-topk-scaling-factor --moe-router-dtype --moe-grouped-gemm
--moe-token-dispatcher-type --moe-shared-expert-intermediate-size --moe-router-num-groups
--moe-router-group-topk --mtp-num-layers --mtp-loss-scaling-factor
--moe-router-enable-expert-bias --moe-router-bias-update-rate
--moe-router-load-balancing-type --moe-aux-loss-coeff --micro-batch-size --global-batch-size
--train-samples --step-batch-size-schedule --qk-layernorm --moe-router-pre-softmax
--decoder-first-pipeline-num-layers --decoder-last-pipeline-num-layers --lr --min-lr
--lr-warmup-samples --lr-decay-samples
--decoupled-lr --decoupled-min-lr --lr-decay-style --lr-wsd-decay-style
--lr-wsd-decay-samples --adam-beta1 --adam-beta2 --weight-decay --clip-grad --seed
--tensor-model-parallel-size --pipeline-model-parallel-size --expert-model-parallel-size
--expert-tensor-parallel-size --use-distributed-optimizer --sequence-parallel
--recompute-granularity --recompute-method --recompute-num-layers --bf16 --fp8-format
--fp8-recipe
""".split())

# flags Megatron-LM parses as int (type=int in arguments.py or an int dataclass field)
MEGATRON_INT_FLAGS = frozenset("""
--num-layers --hidden-size --ffn-hidden-size --num-attention-heads --seq-length
--max-position-embeddings --vocab-size --rotary-base --q-lora-rank --kv-lora-rank --qk-head-dim
--qk-pos-emb-head-dim --v-head-dim --num-experts --moe-ffn-hidden-size --moe-router-topk
--moe-shared-expert-intermediate-size --moe-router-num-groups --moe-router-group-topk
--mtp-num-layers --micro-batch-size --global-batch-size --train-samples --lr-warmup-samples
--lr-decay-samples --lr-wsd-decay-samples --seed --tensor-model-parallel-size
--pipeline-model-parallel-size --expert-model-parallel-size --expert-tensor-parallel-size
--recompute-num-layers --decoder-first-pipeline-num-layers --decoder-last-pipeline-num-layers
""".split())

# torchtitan job-config tables and keys (torchtitan v0.2.2 = pytorch/torchtitan@73a0e697,
# torchtitan/config/job_config.py)
TORCHTITAN_KEYS = {
    "job": {"description"}, "model": {"name", "flavor", "converters"},
    "optimizer": {"name", "lr", "beta1", "beta2", "eps", "weight_decay"},
    "lr_scheduler": {"warmup_steps", "decay_ratio", "decay_type", "min_lr_factor"},
    "training": {"local_batch_size", "global_batch_size", "seq_len", "max_norm", "steps",
                 "mixed_precision_param"},
    "parallelism": {"data_parallel_replicate_degree", "data_parallel_shard_degree",
                    "tensor_parallel_degree", "pipeline_parallel_degree",
                    "expert_parallel_degree", "expert_tensor_parallel_degree",
                    "pipeline_parallel_microbatch_size", "module_fqns_per_model_part"},
    "activation_checkpoint": {"mode", "selective_ac_option"}, "debug": {"seed"},
    "quantize": {"linear", "grouped_mm"},
}


def config(name: str) -> ModelArgs:
    return load_target(f"deepseek-v3-{name.lower()}")[0]


def full_run(recipe: Recipe, *, proxy: ModelArgs = PROXY, name: str = "671B", **kw):
    base = dict(model_args=config(name), name=name, hardware=get_hardware("h800"), gpus=2048,
                tokens=int(14.8e12), seq_len=4096, tp=1, pp=16, ep=64)
    return build_full_run(recipe, proxy, FullRunTarget(**(base | kw)), proxy_tokens=200_000,
                          proxy_info={"study": "s", "trial": 3, "values": {"val_loss": 2.0}})


@pytest.fixture(scope="module")
def fp8_run():
    return full_run(Recipe(precision="fp8", lr=3e-3, batch_schedule="linear"))


def test_native_is_strict_json_with_every_rule(fp8_run):
    d = json.loads(formats.render("native", fp8_run))
    assert d["format"] == "moetune.full_run/1" and d["cost"]["label"] == "modeled"
    assert all(r["rule"] for r in d["rules"])


@pytest.mark.parametrize("seq_len", [4096, 8192])
def test_native_and_deepseek_describe_the_context_the_run_trains_at(seq_len):
    """The published config's inference context (16384 by YaRN factor 40 over 4096) is not the
    run's: the native export's model args and the deepseek config both hold the run's length,
    with YaRN off (max_seq_len <= original_seq_len)."""
    run = full_run(Recipe(), seq_len=seq_len)
    native = json.loads(formats.render("native", run))["model_args"]
    upstream = json.loads(formats.render("deepseek", run))
    assert config("671B").max_seq_len == 16384 and config("671B").rope_factor == 40
    for d in (native, upstream):
        assert d["max_seq_len"] == seq_len == run.recipe.seq_len <= d["original_seq_len"]
    assert native["original_seq_len"] == upstream["original_seq_len"]


def test_an_fp8_torchtitan_module_says_at_its_top_that_it_needs_torchao():
    fp8 = formats.render("torchtitan", full_run(Recipe(precision="fp8")))
    bf16 = formats.render("torchtitan", full_run(Recipe()))
    assert fp8.splitlines()[1].startswith("# REQUIRES: torchao (pip install torchao)")
    assert "torchao (pip install torchao)" not in bf16
    assert any("pip install torchao" in n
               for n in formats.NOTES["torchtitan"](full_run(Recipe(precision="fp8"))))


def test_deepseek_config_loads_with_model_args(fp8_run, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(formats.render("deepseek", fp8_run))
    loaded = ModelArgs.from_json(path)
    training_only = deepseek.sidecar(fp8_run)["training_only"]
    assert dataclasses.replace(loaded, max_seq_len=fp8_run.model_args.max_seq_len,
                               **training_only) == fp8_run.model_args


def test_hf_config_loads_with_transformers(fp8_run, tmp_path):
    transformers = pytest.importorskip("transformers")
    path = tmp_path / "config.json"
    path.write_text(formats.render("hf", fp8_run))
    cfg = transformers.DeepseekV3Config.from_json_file(str(path))
    a = fp8_run.model_args
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.first_k_dense_replace) == (7168, 61, 3)
    assert (cfg.n_routed_experts, cfg.num_experts_per_tok, cfg.n_group, cfg.topk_group) == \
        (256, 8, 8, 4)
    assert cfg.q_lora_rank == a.q_lora_rank and cfg.routed_scaling_factor == a.route_scale
    assert cfg.max_position_embeddings == 4096 and cfg.norm_topk_prob is True
    assert hf.from_hf(json.loads(path.read_text())) == dataclasses.replace(
        a, max_batch_size=8, max_seq_len=ModelArgs().max_seq_len, dtype="bf16",
        original_seq_len=a.original_seq_len)


def test_hf_q_lora_zero_is_null_and_rope_is_plain_at_any_length():
    a = ModelArgs(dim=64, n_layers=2, n_heads=4, vocab_size=256, q_lora_rank=0)
    short = hf.to_hf(a, seq_len=4096)
    long = hf.to_hf(a, seq_len=16384)
    assert short["q_lora_rank"] is None and short["rope_parameters"]["rope_type"] == "default"
    assert long["rope_parameters"]["rope_type"] == "default"  # pre-training: no YaRN
    assert long["max_position_embeddings"] == 16384


def test_hf_names_live_in_one_table_only():
    root = Path(hf.__file__).resolve().parents[1]
    for path in root.rglob("*.py"):
        if path.name != "hf.py":
            assert "num_experts_per_tok" not in path.read_text(), path
            assert "first_k_dense_replace" not in path.read_text(), path


def _parse_args(text: str) -> dict[str, str | None]:
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        flag, _, value = line.partition(" ")
        assert flag not in out, f"{flag} emitted twice"
        out[flag] = value or None
    return out


@pytest.mark.parametrize("recipe", [
    Recipe(precision="fp8", decay="cosine"),
    Recipe(precision="bf16", decay="wsd", batch_schedule="step", checkpoint_ratio=0.5),
    Recipe(precision="fp32", decay="multistep", batch_schedule="constant", batch_start=32),
])
def test_megatron_flags_are_pinned_and_consistent(recipe):
    run = full_run(recipe)
    args = _parse_args(formats.render("megatron", run))
    assert set(args) <= MEGATRON_FLAGS, sorted(set(args) - MEGATRON_FLAGS)
    for flag in MEGATRON_INT_FLAGS & set(args):
        int(args[flag])  # raises if Megatron's int parser would
    assert args["--moe-router-score-function"] == "sigmoid"
    assert "--moe-router-enable-expert-bias" in args
    assert float(args["--moe-router-bias-update-rate"]) == run.recipe.bias_update_speed
    multiple = run.plan.dp * run.recipe.micro_batch
    if "--step-batch-size-schedule" in args:
        batches = [int(e.split(":")[1]) for e in args["--step-batch-size-schedule"].split(",")]
        assert all(b % multiple == 0 for b in batches) and batches[-1] == run.recipe.batch_end
    else:
        assert int(args["--global-batch-size"]) % multiple == 0
    assert ("--fp8-recipe" in args) == (recipe.precision == "fp8")
    assert ("--bf16" in args) == (recipe.precision != "fp32")


def test_megatron_notes_what_it_cannot_express():
    _, notes = megatron.flags(full_run(Recipe(decay="multistep", batch_schedule="step")))
    assert any("multistep" in n for n in notes)
    assert any("DeepSeek-V3 used 0.3 for the first 10T tokens" in n for n in notes)


def test_megatron_file_says_where_its_batch_comes_from_and_what_is_modeled(fp8_run):
    """The file alone tells a reader the batch's rule and that the plan and GPU-hours are
    modeled (they were on stderr or in the native format only)."""
    lines = formats.render("megatron", fp8_run).splitlines()
    batch = next(x for x in lines if x.startswith("# batch: "))
    rule = next(r for r in fp8_run.rules if r.field == "batch_end").rule
    assert batch.endswith(" ".join(rule.split()))
    assert f"# batch: {fp8_run.recipe.batch_end} sequences x 4096 tokens" in batch
    modeled = next(x for x in lines if x.startswith("# MODELED, not measured"))
    p = fp8_run.plan
    assert f"tp={p.tp} pp={p.pp} ep={p.ep} dp={p.dp}" in modeled
    assert f"{fp8_run.cost['gpu_hours']:.4g} GPU-hours" in modeled and "not modeled:" in modeled
    assert _parse_args("\n".join(lines))["--num-layers"] == "61"  # comments, not flags
    # an H800 target's fp8 speed rests on H100 figures: the rule says why they stand for it
    fp8 = next(r for r in fp8_run.rules if r.field == "precision").source
    assert "stand for H800 too" in fp8 and "differs in NVLink only" in fp8


def test_megatron_mup_uses_decoupled_lr():
    run = full_run(Recipe(lr=4e-3), proxy=dataclasses.replace(PROXY, mup_base_dim=32))
    text = formats.render("megatron", run)
    args = _parse_args(text)
    # the base LR (embeddings, head, norms) is decoupled; --lr is the hidden matrices'
    assert float(args["--decoupled-lr"]) == pytest.approx(run.recipe.lr)
    assert float(args["--lr"]) == pytest.approx(run.recipe.lr * 32 / 7168)
    assert float(args["--lr"]) == pytest.approx(run.hidden_lr)
    # what the LR assumes and what the run would need, said in the file
    note = next(line for line in text.splitlines() if line.startswith("# NOTE: muP"))
    assert "norms train at --lr" in note and "no muP init" in note
    assert "no output multiplier" in note and "standard parametrization" in note


@pytest.mark.parametrize("fmt", ["torchtitan", "torchtitan-toml"])
def test_torchtitan_mup_writes_the_hidden_lr_and_says_what_it_assumes(fmt):
    """torchtitan has one AdamW group: it gets the LR nearly every parameter trains at under
    muP (the hidden matrices' lr / width_mult), and the file says what that leaves out."""
    run = full_run(Recipe(lr=4e-3), proxy=dataclasses.replace(PROXY, mup_base_dim=32))
    text = formats.render(fmt, run)
    hidden = run.recipe.lr * 32 / 7168
    assert run.hidden_lr == pytest.approx(hidden)
    written = (tomllib.loads(text)["optimizer"]["lr"] if fmt == "torchtitan-toml" else
               float(re.search(r"default_adamw\(\s*lr=([0-9.e-]+)", text).group(1)))
    assert written == pytest.approx(hidden)
    assert "embeddings, head and norms train at it too" in text and "no muP init" in text


@pytest.mark.parametrize("recipe", [Recipe(precision="fp8"), Recipe(decay="wsd")])
def test_torchtitan_toml_parses_with_known_sections(recipe):
    run = full_run(recipe)
    doc = tomllib.loads(formats.render("torchtitan-toml", run))
    for table, keys in doc.items():
        assert table in TORCHTITAN_KEYS and set(keys) <= TORCHTITAN_KEYS[table], table
    assert doc["training"]["global_batch_size"] == run.recipe.batch_end
    par, training = doc["parallelism"], doc["training"]
    assert par["pipeline_parallel_degree"] == 16 and doc["model"]["flavor"] == "671B"
    # the whole step goes through the pipeline: as many microbatches as Megatron-LM's export
    microbatches = training["local_batch_size"] // par["pipeline_parallel_microbatch_size"]
    assert microbatches == run.recipe.batch_end // (run.plan.dp * run.recipe.micro_batch)
    assert microbatches >= par["pipeline_parallel_degree"]
    assert training["global_batch_size"] % (training["local_batch_size"] * par[
        "data_parallel_shard_degree"]) == 0  # torchtitan train.py's rule
    layers = [f for part in par["module_fqns_per_model_part"] for f in part if "layers." in f]
    assert layers == [f"layers.{i}" for i in range(61)]
    if recipe.precision == "fp8":
        assert doc["quantize"]["linear"]["float8"]["recipe_name"] == "rowwise"


def test_torchtitan_toml_checkpoint_ratio_mapping():
    assert torchtitan_toml._ac(0.0) == {"mode": "none"}
    assert torchtitan_toml._ac(1.0) == {"mode": "full"}
    assert torchtitan_toml._ac(0.25) == {"mode": "selective", "selective_ac_option": "4"}


def test_torchtitan_checkpoint_ratio_mapping_says_what_stands_in():
    assert torchtitan._ac(0.0) == ("None", "")
    assert torchtitan._ac(1.0) == ("FullAC.Config()", "")
    expr, note = torchtitan._ac(0.25)
    assert expr == "SelectiveAC.Config()" and "no per-block AC ratio" in note


def test_unknown_format_lists_the_valid_ones(fp8_run):
    with pytest.raises(ValueError, match=re.escape("valid formats are ['deepseek', 'hf'")):
        formats.render("yaml", fp8_run)
