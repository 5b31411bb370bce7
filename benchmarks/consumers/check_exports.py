"""Load moetune's launch exports with the consumers' own code, at pinned revisions.

    python benchmarks/consumers/check_exports.py --megatron SRC --deepseek SRC \
        [--torchtitan | --torchtitan-toml SITE] [--no-hf] [--only TEXT ...]

``--megatron``: a checkout of NVIDIA/Megatron-LM at d98e8a64ddf34856e74b24714e3bedb2f5a39553;
``--deepseek``: deepseek-ai/DeepSeek-V3 at 9b4e9788e4a3a731f7567338ed15d3ec549ce03b;
``--torchtitan``: the format ``torchtitan`` with torchtitan 0.3.0 importable here (.ci/run
installs it: ``pip install --no-deps torchtitan==0.3.0 torchao==0.18.0 spmd_types==0.2.3
torch_checkpointing==0.1.1 torchdata==0.11.0`` and ``pip install tyro``);
``--torchtitan-toml``: the legacy format with a folder torchtitan 0.2.2 is pip-installed into
(``pip install --no-deps --target DIR torchtitan==0.2.2 tyro docstring-parser typeguard
shtab``); the two import one package name, so one of them per run. Each consumer runs on every
export of `cases` (the 16B, 236B and 671B targets, planner and user layouts, three batch
schedules; ``--only`` keeps the cases whose name contains TEXT):

- Megatron-LM: ``parse_args`` on the file's words (as ``$(grep -v '^#' run.args)`` gives them),
  with the environment of the file's ``# launch:`` line, then ``validate_args`` and
  ``core_transformer_config_from_args``, then the named drift checks of `megatron_checks`;
- DeepSeek-V3: ``ModelArgs(**json.load(f))`` from ``inference/model.py``, and its
  ``precompute_freqs_cis`` against plain RoPE (no YaRN at the run's length);
- transformers: the HF export, shrunk, instantiated and run forward once, then `hf_checks`;
- torchtitan 0.3: ``ConfigManager.parse_args(["--module", M, "--config", F])`` on the module,
  the model's ``update_from_config`` and ``build`` on the meta device, ``ParallelDims``, the
  pipeline's module names and microbatches, then the named checks of `torchtitan_checks`;
- torchtitan 0.2.2: ``ConfigManager.parse_args`` on the TOML, ``ParallelDims`` for the layout,
  and the batch rules of its ``train.py`` and ``pipeline_parallel.py``.

Stubbed, because only a GPU machine has them: Triton (imported by kernels the checks never
run; a stand-in module), the device queries (``torch.cuda.get_device_capability`` and
``get_device_properties`` answer Hopper, 9.0, as the h800 target; torchtitan's fp8 converters'
capability check the same), Transformer Engine's version checks (answer: recent enough),
DeepSeek-V3's ``kernel`` module (fp8 GEMMs); for torchtitan 0.3, its logging and data back ends
(tensorboard, wandb, datasets). Megatron-LM at this revision imports ``typing.override``
(Python 3.12); on 3.11 ``typing_extensions``' identical decorator stands in. Prints one line
per check and exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.abc
import importlib.machinery
import io
import json
import os
import re
import sys
import tempfile
import traceback
import types
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from trainers.config.model_args import ModelArgs  # noqa: E402
from trainers.config.recipe import Recipe  # noqa: E402
from tuner.export import formats  # noqa: E402
from tuner.modeling.full_run import FullRun, FullRunTarget, build_full_run, load_target  # noqa: E402
from tuner.modeling.hardware import get_hardware  # noqa: E402

PROXY = ModelArgs(dim=64, n_layers=2, n_heads=4, inter_dim=128, moe_inter_dim=16,
                  vocab_size=256, n_routed_experts=8, n_activated_experts=2, kv_lora_rank=32,
                  qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, score_func="sigmoid")
LAYOUTS = [("671B", 2048, {}), ("671B", 2048, {"tp": 1, "pp": 16, "ep": 64}),
           ("671B", 1024, {"pp": 8}), ("236B", 2048, {}), ("236B", 1024, {"pp": 16}),
           ("16B", 64, {}), ("16B", 64, {"pp": 4}), ("16B", 256, {"tp": 2, "pp": 8})]
RECIPES = {"linear-fp8": Recipe(precision="fp8", batch_schedule="linear"),
           "step-bf16": Recipe(precision="bf16", batch_schedule="step", decay="wsd"),
           "constant-bf16": Recipe(precision="bf16", batch_schedule="constant", batch_start=32)}


def cases() -> list[tuple[str, FullRun]]:
    out = []
    for name, gpus, fixed in LAYOUTS:
        args, short = load_target(f"deepseek-v3-{name.lower()}")
        for label, recipe in RECIPES.items():
            target = FullRunTarget(model_args=args, name=short, hardware=get_hardware("h800"),
                                   gpus=gpus, tokens=int(14.8e12), **fixed)
            run = build_full_run(recipe, PROXY, target, proxy_tokens=200_000)
            layout = " ".join(f"{k}={v}" for k, v in fixed.items()) or "planner"
            out.append((f"{name} {gpus} GPUs {layout} {label} ({run.plan})", run))
    return out


class _Stand(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Import any module under the given top-level names as a stand-in (a MagicMock)."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name.split(".")[0] in self.names:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> Any:
        m = mock.MagicMock(name=spec.name)
        m.__path__, m.__spec__, m.__version__ = [], spec, "3.0.0"
        return m

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def stub_triton() -> None:
    """Torch probes for Triton at import; finish that before Triton's stand-in appears."""
    import torch._dynamo  # noqa: F401
    import torch._functorch.aot_autograd  # noqa: F401
    import torch._inductor  # noqa: F401
    import torch.utils.flop_counter  # noqa: F401
    sys.meta_path.insert(0, _Stand({"triton"}))


def report(results: list[tuple[str, str, str]]) -> int:
    for consumer, case, outcome in results:
        print(f"{consumer:12} {outcome[:160]:<8} {case}")
    failed = sum(1 for *_, o in results if o != "OK")
    print(f"{len(results) - failed} of {len(results)} checks passed")
    return 1 if failed else 0


# -- Megatron-LM -------------------------------------------------------------------------------

def check_megatron(src: Path, runs: list[tuple[str, FullRun]]) -> list[tuple[str, str, str]]:
    import typing

    import typing_extensions
    if not hasattr(typing, "override"):
        typing.override = typing_extensions.override  # type: ignore[attr-defined]
    sys.path.insert(0, str(src))
    from megatron.core.transformer import transformer_config
    from megatron.training import argument_utils
    from megatron.training import arguments as margs
    new_enough = staticmethod(lambda *a, **k: True)
    results = []
    for case, run in runs:
        text = formats.render("megatron", run)
        words = [w for line in text.splitlines() if line and not line.startswith("#")
                 for w in line.split()]
        launch = next(line for line in text.splitlines() if line.startswith("# launch:"))
        env = dict(re.findall(r"(\w+)=(\S+) torchrun", launch)) | {
            "WORLD_SIZE": str(run.target.gpus), "RANK": "0"}
        hopper = mock.Mock(major=9, minor=0)
        with mock.patch.dict(os.environ, env), \
                mock.patch.object(sys, "argv", ["pretrain_gpt.py", *words]), \
                mock.patch("torch.cuda.get_device_capability", return_value=(9, 0)), \
                mock.patch("torch.cuda.get_device_properties", return_value=hopper), \
                mock.patch.object(transformer_config, "is_te_min_version", new_enough), \
                mock.patch.object(margs, "is_te_min_version", new_enough), \
                contextlib.redirect_stdout(io.StringIO()):
            try:
                args = margs.parse_args()
                margs.validate_args(args)
                cfg = argument_utils.core_transformer_config_from_args(args)
                assert cfg.qk_layernorm and args.step_batch_size_schedule == _schedule(text)
                failed = [k for k, ok in megatron_checks(run, text).items() if not ok]
                outcome = f"FAIL {', '.join(failed)}" if failed else "OK"
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - the check's verdict
                outcome = f"FAIL {type(exc).__name__}: {exc}"
        results.append(("megatron", case, outcome))
    return results


def megatron_checks(run: FullRun, text: str) -> dict[str, bool]:
    """What Megatron-LM computes otherwise than the recipe, with no flag for it, must be said in
    the file, by name: its group score (top-k/group_topk sum), Transformer Engine >= 2.3 for
    blockwise fp8, and where its batch stops changing when that is not the ramp mark."""
    from tuner.export.formats import megatron
    a, r = run.model_args, run.recipe
    per = a.n_activated_experts // a.n_limited_groups
    routes_alike = a.n_expert_groups == 1 or a.group_rule == f"sum_top{per}"
    ramp_end = megatron.ramp_end_step(run) if run.recipe.batch_schedule != "constant" else 0
    return {
        "group score": routes_alike or "# NOTE: group-limited routing: Megatron-LM" in text,
        "te version": r.precision != "fp8" or "Transformer Engine >= 2.3" in text,
        "ramp end": ramp_end in (0, run.steps.ramp) or f"at step {ramp_end}," in text,
        "multistep": r.decay != "multistep" or "differs by up to" in text,
    }


def _schedule(text: str) -> str | None:
    m = re.search(r"^--step-batch-size-schedule (\S+)$", text, re.M)
    return m.group(1) if m else None


# -- DeepSeek-V3 ---------------------------------------------------------------------------------

def check_deepseek(src: Path, runs: list[tuple[str, FullRun]]) -> list[tuple[str, str, str]]:
    sys.meta_path.insert(0, _Stand({"kernel"}))  # fp8 GEMM kernels (Triton)
    sys.path.insert(0, str(src / "inference"))
    import model as upstream
    import torch
    results = []
    for case, run in runs:
        try:
            args = upstream.ModelArgs(**json.loads(formats.render("deepseek", run)))
            plain = dataclasses.replace(args, rope_factor=1.0)
            assert args.max_seq_len <= args.original_seq_len, "YaRN would be on"
            torch.testing.assert_close(upstream.precompute_freqs_cis(args),
                                       upstream.precompute_freqs_cis(plain))
            outcome = "OK"
        except Exception as exc:  # noqa: BLE001
            outcome = f"FAIL {type(exc).__name__}: {exc}"
        results.append(("deepseek", case, outcome))
    return results


# -- transformers --------------------------------------------------------------------------------

SHRINK = {"hidden_size": 64, "intermediate_size": 96, "moe_intermediate_size": 16,
          "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
          "n_routed_experts": 16, "vocab_size": 128, "kv_lora_rank": 16, "qk_nope_head_dim": 8,
          "qk_rope_head_dim": 4, "v_head_dim": 8}


def hf_checks(run: FullRun, d: dict[str, Any], model: Any) -> dict[str, bool]:
    """The drifts transformers has no key for must be said in the sidecar, by name."""
    notes = " ".join(formats.SIDECARS["hf"](run)["notes"])
    has_mtp = any("mtp" in n.lower() for n, _ in model.named_modules())
    return {
        "no stray key": d["model_type"] == "deepseek_v3" or "num_mtp_layers" not in d,
        "mtp said": not run.model_args.mtp_depth or (not has_mtp and "MTP module" in notes),
        "training values said": "a model config only" in notes,
    }


def check_hf(runs: list[tuple[str, FullRun]]) -> list[tuple[str, str, str]]:
    import torch
    import transformers
    results = []
    for case, run in runs:
        try:
            d = json.loads(formats.render("hf", run))
            small = d | SHRINK | {"q_lora_rank": d["q_lora_rank"] and 24,
                                  "n_group": min(d["n_group"], 4),
                                  "topk_group": min(d["topk_group"], 2)}
            model = transformers.AutoModelForCausalLM.from_config(
                transformers.AutoConfig.for_model(**small))
            assert type(model).__name__ == d["architectures"][0]
            logits = model(torch.randint(0, 128, (2, 8))).logits
            assert torch.isfinite(logits).all()
            failed = [k for k, ok in hf_checks(run, d, model).items() if not ok]
            outcome = f"FAIL {', '.join(failed)}" if failed else "OK"
        except Exception as exc:  # noqa: BLE001
            outcome = f"FAIL {type(exc).__name__}: {exc}"
        results.append((f"hf {transformers.__version__}", case, outcome))
    return results


# -- torchtitan 0.3 (Python config module) ---------------------------------------------------

def stub_torchtitan_imports() -> None:
    """torchtitan 0.3.0 imports its logging and data back ends at config-load time; they play
    no part in the config, and the full install would replace transformers' huggingface_hub."""
    sys.meta_path.insert(0, _Stand({"tensorboard", "wandb", "datasets"}))


@dataclasses.dataclass(frozen=True)
class TitanBatch:
    """A loaded config's batch in sequences, from either TrainingConfig schema: 0.3.0's
    (sequences) or main's after it (tokens, torchtitan/trainer.py at b5bcd76)."""

    global_seqs: int  # per optimizer step
    forward_seqs: int  # per data-parallel rank and forward (a pipeline microbatch)
    pp_microbatches: int  # forwards per pipeline step and data-parallel rank
    seq_len: int
    schema: str

    @classmethod
    def of(cls, cfg: Any) -> TitanBatch:
        t, p = cfg.training, cfg.parallelism
        pp = p.pipeline_parallel_degree > 1
        if hasattr(t, "num_tokens_per_train_step"):
            seq = t.max_context_length
            assert t.num_tokens_per_train_step % seq == 0, "tokens per step in whole sequences"
            assert t.num_tokens_per_microbatch_per_dp_rank % seq == 0, "a whole-sequence forward"
            return cls(t.num_tokens_per_train_step // seq,
                       t.num_tokens_per_microbatch_per_dp_rank // seq,
                       p.num_pp_microbatches if pp else 1, seq, "tokens")
        micro = p.pipeline_parallel_microbatch_size if pp else t.local_batch_size
        return cls(t.global_batch_size, micro, t.local_batch_size // micro, t.seq_len,
                   "sequences")


def torchtitan_checks(run: FullRun, cfg: Any, text: str) -> dict[str, bool]:
    """What the loaded config must hold for the run to mean what the recipe means, by name."""
    from torchtitan.models.common import RMSNorm
    from torchtitan.models.common.moe import MoE, TokenChoiceTopKRouter
    r, a, p = run.recipe, run.model_args, run.plan
    t, par, model = cfg.training, cfg.parallelism, cfg.model_spec.model
    b = TitanBatch.of(cfg)
    group = cfg.optimizer.param_groups[0].optimizer_kwargs
    routers = [c for _, c, _, _ in model.traverse(TokenChoiceTopKRouter.Config)]
    coeffs = {c.load_balance_coeff for _, c, _, _ in model.traverse(MoE.Config)}
    warm = cfg.lr_scheduler.warmup_steps
    mtp = len(model.mtp_layers)
    return {
        "lr": group["lr"] == run.hidden_lr and group["weight_decay"] == r.weight_decay,
        "adam betas": tuple(group["betas"]) == (r.beta1, r.beta2),
        "warmup tokens": (warm - 1) * b.global_seqs < run.steps.warmup_samples
        <= warm * b.global_seqs,
        "tokens": abs(t.steps * b.global_seqs * b.seq_len - run.target.tokens)
        <= b.global_seqs * b.seq_len,
        "batch": b.global_seqs == r.batch_end and b.seq_len == r.seq_len
        and b.forward_seqs == r.micro_batch,
        "architecture": model.dim == a.dim and len(model.layers) == a.n_layers
        and all(x.num_experts == a.n_routed_experts and x.top_k == a.n_activated_experts
                and x.score_func == a.score_func and x.route_scale == a.route_scale
                and (x.num_expert_groups or 1) == a.n_expert_groups for x in routers),
        "gamma": coeffs == {r.bias_update_speed if a.gate_bias else None},
        "norm_eps": {c.eps for _, c, _, _ in model.traverse(RMSNorm.Config)} == {a.norm_eps},
        "mtp": mtp == a.mtp_depth or (p.pp > 1 and "# NOTE: MTP" in text),
        "group score": a.n_expert_groups == 1 or a.gate_bias
        or "group-limited routing: torchtitan" in text,
        "layout": par.data_parallel_shard_degree * par.tensor_parallel_degree
        * par.pipeline_parallel_degree == run.target.gpus
        and (par.data_parallel_shard_degree * par.tensor_parallel_degree)
        % par.expert_parallel_degree == 0,  # parallel_dims.py: efsdp = fsdp * tp // ep
    }


def _pipeline_ok(cfg: Any, names: set[str]) -> None:
    """trainer.py / pipeline_parallel.py: whole gradient-accumulation steps; every stage's
    modules exist; enough microbatches per step."""
    p, b = cfg.parallelism, TitanBatch.of(cfg)
    per_pass = b.forward_seqs * b.pp_microbatches * p.data_parallel_shard_degree
    assert b.global_seqs % per_pass == 0, f"{b.global_seqs} sequences in passes of {per_pass}"
    if p.pipeline_parallel_degree > 1:
        parts = p.module_fqns_per_model_part
        assert len(parts) == p.pipeline_parallel_degree, f"{len(parts)} stages"
        missing = sorted({m for part in parts for m in part} - names)
        assert not missing, f"no such modules {missing}"
        assert b.pp_microbatches >= p.pipeline_parallel_degree, (
            f"{b.pp_microbatches} microbatches")


def check_torchtitan(runs: list[tuple[str, FullRun]]) -> list[tuple[str, str, str]]:
    """torchtitan 0.3.0's ConfigManager on each exported module, then its own model build on
    the meta device (``update_from_config`` + ``build``), ParallelDims and the batch rules."""
    import torch
    import torchtitan
    import torchtitan.components.quantization.float8 as float8
    from torchtitan.config.manager import ConfigManager
    from torchtitan.distributed.parallel_dims import ParallelDims

    from tuner.export.formats import torchtitan as tt_format
    float8.has_cuda_capability = lambda *a: True  # Hopper, as the h800 target
    version = getattr(torchtitan, "__version__", "?")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        sys.path.insert(0, tmp)
        for i, (case, run) in enumerate(runs):
            name = f"moetune_case{i}"
            text = formats.render("torchtitan", run, stem=name)
            (Path(tmp) / f"{name}.py").write_text(text)
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    cfg = ConfigManager().parse_args(["--module", name,
                                                      "--config", tt_format.FUNCTION])
                p = cfg.parallelism
                ParallelDims(dp_replicate=p.data_parallel_replicate_degree,
                             dp_shard=p.data_parallel_shard_degree, cp=1,
                             tp=p.tensor_parallel_degree, pp=p.pipeline_parallel_degree,
                             ep=p.expert_parallel_degree, world_size=run.target.gpus)
                cfg.model_spec.model.update_from_config(config=cfg)
                with torch.device("meta"):
                    names = {n for n, _ in cfg.model_spec.model.build().named_modules()}
                _pipeline_ok(cfg, names)
                failed = [k for k, ok in torchtitan_checks(run, cfg, text).items() if not ok]
                outcome = f"FAIL {', '.join(failed)}" if failed else "OK"
            except (Exception, SystemExit) as exc:  # noqa: BLE001
                outcome = f"FAIL {type(exc).__name__}: {exc}"
            results.append((f"torchtitan {version} ({schema()})", case, outcome))
    return results


def schema() -> str:
    """Which TrainingConfig the importable torchtitan has: main's has the batch in tokens (its
    version string still reads 0.3.0), the 0.3.0 release's in sequences."""
    from torchtitan.config.configs import TrainingConfig

    fields = {f.name for f in dataclasses.fields(TrainingConfig)}
    return "batch in tokens: main" if "num_tokens_per_train_step" in fields else "release"


# -- torchtitan 0.2.2 (legacy TOML) ------------------------------------------------------------

def check_torchtitan_toml(site: Path,
                          runs: list[tuple[str, FullRun]]) -> list[tuple[str, str, str]]:
    sys.path.insert(0, str(site))
    from torchtitan.config.manager import ConfigManager
    from torchtitan.distributed.parallel_dims import ParallelDims
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for case, run in runs:
            path = Path(tmp) / "job.toml"
            path.write_text(formats.render("torchtitan-toml", run))
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    cfg = ConfigManager().parse_args(["--job.config_file", str(path)])
                p, t = cfg.parallelism, cfg.training
                ParallelDims(dp_replicate=p.data_parallel_replicate_degree,
                             dp_shard=p.data_parallel_shard_degree, cp=1,
                             tp=p.tensor_parallel_degree, pp=p.pipeline_parallel_degree,
                             ep=p.expert_parallel_degree,
                             etp=p.expert_tensor_parallel_degree, world_size=run.target.gpus)
                dp = p.data_parallel_replicate_degree * p.data_parallel_shard_degree
                assert t.global_batch_size % (t.local_batch_size * dp) == 0, "train.py"
                if p.pipeline_parallel_degree > 1:
                    micro = t.local_batch_size // p.pipeline_parallel_microbatch_size
                    assert micro >= p.pipeline_parallel_degree, f"{micro} microbatches"
                outcome = "OK"
            except (Exception, SystemExit) as exc:  # noqa: BLE001
                outcome = f"FAIL {type(exc).__name__}: {exc}"
            results.append(("torchtitan 0.2.2", case, outcome))
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--megatron", type=Path)
    ap.add_argument("--deepseek", type=Path)
    ap.add_argument("--torchtitan", action="store_true",
                    help="check the torchtitan format with the torchtitan (0.3) importable here")
    ap.add_argument("--torchtitan-toml", type=Path, metavar="SITE",
                    help="check the torchtitan-toml format with torchtitan 0.2.2 in SITE")
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--only", action="append", default=[], metavar="TEXT",
                    help="only the cases whose name contains TEXT (repeatable)")
    a = ap.parse_args(argv)
    if a.torchtitan and a.torchtitan_toml:
        ap.error("--torchtitan and --torchtitan-toml: both import a package named torchtitan; "
                 "run them one at a time")
    runs = [(c, r) for c, r in cases() if not a.only or any(x in c for x in a.only)]
    stub_triton()
    results: list[tuple[str, str, str]] = []
    try:
        if a.deepseek:
            results += check_deepseek(a.deepseek, runs)
        if not a.no_hf:
            results += check_hf(runs)
        if a.torchtitan:
            stub_torchtitan_imports()
            results += check_torchtitan(runs)
        if a.torchtitan_toml:
            results += check_torchtitan_toml(a.torchtitan_toml, runs)
        if a.megatron:
            results += check_megatron(a.megatron, runs)
    except Exception:  # noqa: BLE001 - a consumer that does not even import
        traceback.print_exc()
        return 2
    return report(results)


if __name__ == "__main__":
    sys.exit(main())
