"""The parallel layouts the launch consumers accept, each rule with the consumer code holding it.

A layout (tp, pp, ep and dp = gpus / (tp·pp)) is launchable when every rule below holds. The
planner proposes only such layouts, and a layout the user fixes with ``--tp/--pp/--ep`` that
breaks one is refused with the rule's text. The rules were read at
NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553 and torchtitan v0.2.2
(pytorch/torchtitan@73a0e6979dd10b6b1904098eb3c8f62c18ab87ce); expert tensor parallelism is 1
and context parallelism 1 in every export.

Uneven pipeline stages are not a rule here: `tuner.modeling.cost_model.stage_layers` splits
any L >= pp blocks in a way Megatron-LM's ``--decoder-first/last-pipeline-num-layers`` express.

    >>> layout_errors(args_671b, 2048, tp=3, pp=None, ep=None)  # doctest: +SKIP
    ["--tp 3: the world size 2048 must be divisible by tp*pp (Megatron-LM@d98e8a64 ...", ...]
"""

from __future__ import annotations

from trainers.config.model_args import ModelArgs

MEGATRON = "Megatron-LM@d98e8a64"
TORCHTITAN = "torchtitan v0.2.2"


def _tp_errors(a: ModelArgs, gpus: int, tp: int) -> list[str]:
    out = []
    if gpus % tp:
        out.append(f"--tp {tp}: the world size {gpus} must be divisible by tp*pp ({MEGATRON} "
                   "validate_args: 'world size is not divisible by total_model_size'; "
                   f"{TORCHTITAN} ParallelDims: dp_replicate*dp_shard*cp*tp*pp == world_size)")
    if a.n_heads % tp:
        out.append(f"--tp {tp}: num_attention_heads ({a.n_heads}) must be a multiple of "
                   f"tensor_model_parallel_size ({MEGATRON} TransformerConfig.__post_init__)")
    return out


def _pp_errors(a: ModelArgs, gpus: int, tp: int | None, pp: int) -> list[str]:
    out = []
    if gpus % (pp * (tp or 1)):
        out.append(f"--pp {pp}: the world size {gpus} must be divisible by tp*pp = "
                   f"{(tp or 1) * pp} ({MEGATRON} validate_args: 'world size is not divisible "
                   "by total_model_size')")
    if pp > a.n_layers:
        out.append(f"--pp {pp}: every pipeline stage needs at least one of the n_layers="
                   f"{a.n_layers} blocks ({MEGATRON} TransformerConfig.__post_init__: "
                   "'num_layers_in_first_pipeline_stage must be larger than 0' and 'Mismatch: "
                   "middle layers remaining but middle PP stages available')")
    return out


def _ep_errors(a: ModelArgs, gpus: int, pp: int | None, ep: int) -> list[str]:
    out = []
    if a.n_routed_experts % ep:
        out.append(f"--ep {ep}: the number of experts ({a.n_routed_experts}) should be a "
                   f"multiple of expert_model_parallel_size ({MEGATRON} validate_args)")
    if gpus % (ep * (pp or 1)):
        out.append(f"--ep {ep}: the world size {gpus} must be divisible by "
                   f"expert_tensor_parallel*ep*pp = {ep * (pp or 1)} ({MEGATRON} "
                   "parallel_state.initialize_model_parallel; "
                   f"{TORCHTITAN} ParallelDims: dp_shard*cp*tp divisible by etp*ep)")
    return out


def layout_errors(a: ModelArgs, gpus: int, *, tp: int | None, pp: int | None,
                  ep: int | None) -> list[str]:
    """The consumer rules the given degrees break (``None``: not fixed, not checked).

    Each message names the flag, the rule, the value and the consumer code holding the rule.
    """
    out = []
    if tp is not None:
        out += _tp_errors(a, gpus, tp)
    if pp is not None:
        out += _pp_errors(a, gpus, tp, pp)
    if ep is not None:
        out += _ep_errors(a, gpus, pp, ep)
    return out


def is_launchable(a: ModelArgs, gpus: int, *, tp: int, pp: int, ep: int) -> bool:
    """Whether a complete layout breaks none of the rules (dp = gpus / (tp·pp)), including
    that ep divides tp·dp (experts are spread over the tensor- and data-parallel ranks)."""
    if layout_errors(a, gpus, tp=tp, pp=pp, ep=ep) or gpus % (tp * pp):
        return False
    return (gpus // pp) % ep == 0
