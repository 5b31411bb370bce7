from __future__ import annotations

import pytest
import torch

from trainers import ModelArgs


@pytest.fixture
def tiny_args() -> ModelArgs:
    """A 3-layer model with every feature on: q compression, groups, bias, MTP."""
    return ModelArgs(
        vocab_size=256, dim=64, inter_dim=128, moe_inter_dim=32, n_layers=3, n_dense_layers=1,
        n_heads=4, n_routed_experts=8, n_shared_experts=1, n_activated_experts=2,
        n_expert_groups=4, n_limited_groups=2, score_func="sigmoid", route_scale=2.5,
        q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
        v_head_dim=16, max_seq_len=256, mtp_depth=1,
    )


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
