"""The full run's fp8 speed, modeled per GEMM shape and pass from published kernel figures."""

from __future__ import annotations

import pytest

from trainers.config.model_args import ModelArgs
from trainers.presets import PUBLISHED_CONFIGS
from tuner.modeling import cost_model as cm
from tuner.modeling import fp8_speed as fs
from tuner.modeling.hardware import get_hardware

H100 = get_hardware("h100")
# (m, n, k) at a full run's 16K tokens per GEMM: torchao's H100 auto-filter keeps the first
# group in bf16 (N <= 2048, K <= 1024, or N <= 4096 and K <= 2048) and converts the second.
SKIPPED = [(16384, 1024, 1024), (16384, 2048, 2048), (16384, 4096, 1024), (16384, 1024, 4096)]
CONVERTED = [(16384, 8192, 8192), (16384, 18432, 7168), (16384, 7168, 18432),
             (16384, 14336, 4096)]


def config(name: str) -> ModelArgs:
    return ModelArgs.from_json(PUBLISHED_CONFIGS / f"config_{name}.json")


def speed(m: int, n: int, k: int) -> fs.GemmSpeed:
    gemm = fs.Gemm(name="x", m=m, n=n, k=k, flops_per_token=1.0)
    return fs.GemmSpeed(gemm=gemm, kernel={p: fs.kernel_speedup(m, n, k, p, H100)
                                           for p in fs.PASSES})


def test_the_cited_rates_reproduce_the_published_kernel_times():
    # torchao's H100 table: per expert 4096 tokens, N 2048, K 7168, 8 experts; the GEMM rows
    # take 779.3 / 778.6 / 2105.4 us. Our fp8 pass minus its casts is the GEMM alone.
    m, n, k, experts = 4096, 2048, 7168, 8
    for p, us in (("fwd", 779.3), ("dgrad", 778.6), ("wgrad", 2105.4)):
        inputs = {"fwd": m * k + n * k, "dgrad": m * n + n * k, "wgrad": m * n + m * k}[p]
        cast = fs.SCALE_BYTES_PER_ELEMENT * inputs / (
            H100.mem_bw_tbps * 1e12 * fs.BLOCKWISE_H100.bandwidth_fraction)
        gemm = fs.pass_seconds(m, n, k, p, "fp8", H100) - cast
        assert gemm * experts * 1e6 == pytest.approx(us, rel=0.01)
    # the quantization kernels of that table moved 2390-2809 GB/s; the priced rate lies inside
    rate = H100.mem_bw_tbps * 1e3 * fs.BLOCKWISE_H100.bandwidth_fraction
    assert 2390 <= rate <= 2809


@pytest.mark.parametrize("shape", CONVERTED)
def test_fp8_pays_in_forward_and_dgrad_where_torchao_converts(shape):
    s = speed(*shape)
    assert not fs.auto_filter_skips(shape[1], shape[2])
    assert s.kernel["fwd"] > 1.2 and s.kernel["dgrad"] > 1.2
    assert 1.15 < s.train < 1.6  # below the 2x of the peaks: casts and the slow wgrad


@pytest.mark.parametrize("shape", SKIPPED)
def test_fp8_gains_about_nothing_where_the_auto_filter_skips(shape):
    s = speed(*shape)
    assert fs.auto_filter_skips(shape[1], shape[2])
    assert s.train <= 1.1
    assert s.train < min(speed(*c).train for c in CONVERTED)


@pytest.mark.parametrize("shape", SKIPPED + CONVERTED + [(4096, 2048, 7168)])
def test_wgrad_is_slower_than_forward_and_priced_at_bf16(shape):
    # compute-bound shapes (m in the thousands); at a few hundred tokens every pass is
    # memory-bound and the forward's weight cast costs more than the wgrad's casts
    s = speed(*shape)
    assert s.kernel["wgrad"] < s.kernel["fwd"]
    assert s.kernel["wgrad"] < 1.0  # 457 TFLOP/s against bf16's 0.78 * 989
    assert s.priced["wgrad"] == 1.0
    assert all(v >= 1.0 for v in s.priced.values())


def test_small_gemms_are_memory_bound_and_fp8_does_not_pay():
    # 128 tokens per expert (no expert parallelism): the casts cost more than the GEMM saves
    s = speed(128, 2048, 7168)
    assert max(s.kernel.values()) < 1.0 and s.train == 1.0


def test_block_gemms_add_up_to_the_cost_models_block_flops():
    for name in ("16B", "236B", "671B"):
        a = config(name)
        gemms = fs.block_gemms(a, tokens=4096, ep=8, tp=2)
        total = sum(g.flops_per_token for g in gemms)
        assert total == pytest.approx(cm.flops_per_token(a, 4096).block_matmul, rel=1e-12)


def test_expert_parallelism_grows_the_expert_gemms():
    a = config("671B")
    m = {ep: next(g.m for g in fs.block_gemms(a, tokens=4096, ep=ep)
                  if g.name == "experts.w2") for ep in (1, 64)}
    assert m == {1: 4096 * 8 // 256, 64: 4096 * 8 * 64 // 256}


def test_deepseek_v3_end_to_end_lands_in_the_published_range():
    # published fp8 gains end to end, Llama-3 8B on 8xH100: 1.10x rowwise, 1.25x tensorwise
    # (torchao docs); the block matmuls alone gain more than the whole step would
    a, h800 = config("671B"), get_hardware("h800")
    s = fs.fp8_speed(a, h800, tokens=4096, ep=cm.DEEPSEEK_V3_EP)
    assert 1.10 <= s.train <= 1.25
    f = cm.flops_per_token(a, 4096)
    whole = (cm.gpu_seconds_per_token(f, h800, "bf16", 0.4)
             / cm.gpu_seconds_per_token(f, h800, "fp8", 0.4, fp8=s))
    assert 1.0 < whole < s.train


def test_bad_pass_and_precision_are_refused():
    with pytest.raises(ValueError, match="pass: must be one of"):
        fs.pass_seconds(8, 8, 8, "backward", "fp8", H100)
    with pytest.raises(ValueError, match="precision: must be 'bf16' or 'fp8'"):
        fs.pass_seconds(8, 8, 8, "fwd", "fp16", H100)


def test_an_fp8_export_says_where_its_speed_comes_from():
    from trainers.config.recipe import Recipe
    from tuner.modeling.full_run import FullRunTarget, build_full_run

    proxy = ModelArgs(dim=64, n_layers=2, n_heads=4, inter_dim=128, moe_inter_dim=16,
                      vocab_size=256, n_routed_experts=8, n_activated_experts=2,
                      kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16)
    target = FullRunTarget(model_args=config("16B"), name="16B", hardware=get_hardware("h800"),
                           gpus=64, tokens=10**12)
    runs = {p: build_full_run(Recipe(precision=p), proxy, target, proxy_tokens=200_000)
            for p in ("bf16", "fp8")}
    speed = runs["fp8"].cost["precision_speed"]
    assert speed["source"].startswith("fp8 speed: modeled from torchao blockwise fp8")
    assert speed["label"] == "modeled" and len(speed["gemms"]) == len(
        fs.block_gemms(config("16B"), tokens=4096))
    rule = next(r for r in runs["fp8"].rules if r.field == "precision")
    assert "fp8 speed: modeled from" in rule.source
    assert runs["bf16"].cost["precision_speed"]["source"] == "bf16 at the bf16 peak"
    # the fp8 run's hours are the bf16 run's divided by the modeled gain (same layout)
    assert runs["fp8"].plan == runs["bf16"].plan
    assert runs["fp8"].cost["gpu_hours"] < runs["bf16"].cost["gpu_hours"]
