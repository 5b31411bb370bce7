"""Our model and Hugging Face's DeepseekV3ForCausalLM give the same logits on the same weights."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from trainers import Transformer

transformers = pytest.importorskip("transformers")


def hf_config(args, attn_implementation: str = "eager"):
    return transformers.DeepseekV3Config(
        vocab_size=args.vocab_size, hidden_size=args.dim, intermediate_size=args.inter_dim,
        moe_intermediate_size=args.moe_inter_dim, num_hidden_layers=args.n_layers,
        first_k_dense_replace=args.n_dense_layers, num_attention_heads=args.n_heads,
        num_key_value_heads=args.n_heads, n_shared_experts=args.n_shared_experts,
        n_routed_experts=args.n_routed_experts, num_experts_per_tok=args.n_activated_experts,
        n_group=args.n_expert_groups, topk_group=args.n_limited_groups,
        routed_scaling_factor=args.route_scale, norm_topk_prob=True,
        q_lora_rank=args.q_lora_rank or None, kv_lora_rank=args.kv_lora_rank,
        qk_nope_head_dim=args.qk_nope_head_dim, qk_rope_head_dim=args.qk_rope_head_dim,
        v_head_dim=args.v_head_dim, rms_norm_eps=args.norm_eps,
        max_position_embeddings=args.max_seq_len, rope_interleave=True,
        rope_parameters={"rope_type": "default", "rope_theta": args.rope_theta},
        tie_word_embeddings=False, attn_implementation=attn_implementation,
    )


def copy_weights_to_hf(ours: Transformer, hf) -> None:
    sd = {}
    sd["model.embed_tokens.weight"] = ours.embed.weight
    sd["model.norm.weight"] = ours.norm.weight
    sd["lm_head.weight"] = ours.head.weight
    attn_names = {"wq": "q_proj", "wq_a": "q_a_proj", "q_norm": "q_a_layernorm",
                  "wq_b": "q_b_proj", "wkv_a": "kv_a_proj_with_mqa", "kv_norm": "kv_a_layernorm",
                  "wkv_b": "kv_b_proj", "wo": "o_proj"}
    mlp_names = {"w1": "gate_proj", "w2": "down_proj", "w3": "up_proj"}
    for i, block in enumerate(ours.layers):
        p = f"model.layers.{i}."
        sd[p + "input_layernorm.weight"] = block.attn_norm.weight
        sd[p + "post_attention_layernorm.weight"] = block.ffn_norm.weight
        for name, module in block.attn.named_children():
            sd[p + f"self_attn.{attn_names[name]}.weight"] = module.weight
        ffn = block.ffn
        if hasattr(ffn, "gate"):
            sd[p + "mlp.gate.weight"] = ffn.gate.weight
            sd[p + "mlp.gate.e_score_correction_bias"] = ffn.gate.bias
            ex = ffn.experts
            sd[p + "mlp.experts.gate_up_proj"] = ex.w13_EDJ.transpose(1, 2)  # (E, 2I, D)
            sd[p + "mlp.experts.down_proj"] = ex.w2_EID.transpose(1, 2)
            for name, hf_name in mlp_names.items():
                sd[p + f"mlp.shared_experts.{hf_name}.weight"] = getattr(ffn.shared, name).weight
        else:
            for name, hf_name in mlp_names.items():
                sd[p + f"mlp.{hf_name}.weight"] = getattr(ffn, name).weight
    missing, unexpected = hf.load_state_dict({k: v.detach() for k, v in sd.items()},
                                             strict=False)
    assert not unexpected, unexpected
    assert not [k for k in missing if "rotary" not in k], missing


@pytest.mark.parametrize(("q_lora_rank", "qk_nope_head_dim"), [(32, 16), (0, 16), (32, 15)])
def test_logits_match_hf_deepseek_v3(tiny_args, q_lora_rank, qk_nope_head_dim):
    """An odd nope head dim takes MLA's split-and-concatenate rope path; even ones rotate the
    whole q head at once."""
    # init std 0.1 (not 0.006) so attention and routing are far from uniform and mismatches show
    args = dataclasses.replace(tiny_args, q_lora_rank=q_lora_rank, mtp_depth=0, init_std=0.1,
                               qk_nope_head_dim=qk_nope_head_dim)
    ours = Transformer(args).eval()
    with torch.no_grad():  # a non-zero bias so the bias path of group-limited routing is exercised
        for gate in ours.moe_gates():
            gate.bias.copy_(torch.randn_like(gate.bias) * 0.05)
    hf = transformers.DeepseekV3ForCausalLM(hf_config(args)).eval()
    copy_weights_to_hf(ours, hf)
    tokens = torch.randint(0, args.vocab_size, (2, 24))
    with torch.no_grad():
        want = hf(input_ids=tokens).logits
        got = ours(tokens).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
