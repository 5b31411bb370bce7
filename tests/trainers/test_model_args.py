from __future__ import annotations

import json

import pytest

from trainers import ModelArgs, count_params, preset, preset_names, shrink
from trainers.presets import DEEPSEEK_V3_671B, PUBLISHED_CONFIGS

CONFIGS = PUBLISHED_CONFIGS


@pytest.mark.parametrize("name", ["16B", "236B", "671B"])
def test_upstream_configs_load_unchanged(name):
    path = CONFIGS / f"config_{name}.json"
    if not path.exists():
        pytest.skip(f"{path} not present in this checkout's shared/ folder")
    raw = json.loads(path.read_text())
    args = ModelArgs(**raw)
    for key, value in raw.items():
        assert getattr(args, key) == value


@pytest.mark.parametrize(("args", "total", "active"), [
    # 671B total / 37.6B active without the MTP module (DeepSeek-V3 technical report,
    # arXiv:2412.19437, §1 and §2.2); 16B: counted from its config
    ("16B", 15.7e9, 2.66e9),
    ("671B", 671e9, 37.6e9),
])
def test_parameter_counts_match_published(args, total, active):
    path = CONFIGS / f"config_{args}.json"
    if not path.exists():
        pytest.skip(f"{path} not present")
    a = ModelArgs(**{**json.loads(path.read_text()), "mtp_depth": 0})
    n_total, n_active = count_params(a)
    assert n_total == pytest.approx(total, rel=0.01)
    assert n_active == pytest.approx(active, rel=0.01)


def test_builtin_671b_equals_upstream_json():
    path = CONFIGS / "config_671B.json"
    if not path.exists():
        pytest.skip(f"{path} not present")
    assert ModelArgs(**json.loads(path.read_text())) == DEEPSEEK_V3_671B


def test_unknown_key_lists_valid_ones():
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['hidden_size'\].*valid keys"):
        ModelArgs.from_dict({"hidden_size": 8})


@pytest.mark.parametrize(("field", "value", "rule"), [
    ("dim", 0, "positive integer"),
    ("n_heads", -1, "positive integer"),
    ("score_func", "relu", "one of"),
    ("n_dense_layers", 99, "<= n_layers"),
    ("n_expert_groups", 3, "divide n_routed_experts"),
    ("n_limited_groups", 16, "<= n_expert_groups"),
    ("qk_rope_head_dim", 7, "even"),
    ("init_std", float("nan"), "finite positive"),
    ("mtp_depth", -1, "non-negative"),
])
def test_bad_model_args_name_the_field(field, value, rule):
    with pytest.raises(ValueError, match=rf"ModelArgs\.{field}: .*{rule}.*{field}="):
        ModelArgs(**{field: value})


def test_from_json_errors(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        ModelArgs.from_json(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        ModelArgs.from_json(bad)


def test_unknown_preset_lists_valid_names():
    with pytest.raises(ValueError, match=r"unknown name 'huge'.*\['debug', 'proxy-l'"):
        preset("huge")


def test_presets_span_1m_to_100m_active_params():
    actives = {name: count_params(preset(name))[1] for name in preset_names()}
    assert actives["debug"] < actives["proxy-s"] < actives["proxy-m"] < actives["proxy-l"]
    assert 0.5e6 <= actives["proxy-s"] <= 2e6
    assert actives["proxy-l"] >= 100e6


def test_shrink_keeps_ratios_of_the_full_config():
    full = DEEPSEEK_V3_671B
    p = shrink(full, dim=256, n_layers=8, n_routed_experts=64)
    assert p.n_activated_experts / p.n_routed_experts == full.n_activated_experts / 256
    assert p.n_shared_experts == full.n_shared_experts
    assert p.n_limited_groups / p.n_expert_groups == full.n_limited_groups / full.n_expert_groups
    assert p.qk_nope_head_dim / p.qk_rope_head_dim == full.qk_nope_head_dim / full.qk_rope_head_dim
    assert p.n_heads * p.v_head_dim / p.dim == pytest.approx(
        full.n_heads * full.v_head_dim / full.dim, rel=0.15)
    assert p.moe_inter_dim / p.dim == pytest.approx(full.moe_inter_dim / full.dim, rel=0.15)
    assert p.score_func == "sigmoid" and p.gate_bias and p.q_lora_rank > 0
    assert p.n_dense_layers >= 1
