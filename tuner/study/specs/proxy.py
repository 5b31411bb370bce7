"""The proxy model a study trains, from its spec's ``[model]`` and ``[data]`` tables."""

from __future__ import annotations

import dataclasses
from typing import cast

from trainers import ModelArgs, preset, shrink
from trainers.config.model_args import GroupScore
from trainers.presets import at_width
from tuner.study.specs.spec import StudySpec, data_vocab_size

DEFAULT_PROXY = "proxy-s"


def resolve_model_args(spec: StudySpec) -> ModelArgs:
    """``preset`` as is; ``full`` shrunk to the size of ``proxy`` (default proxy-s) keeping the
    full config's proportions. The corpus' vocabulary (``data.vocab_size``, else a
    tokenizer's) replaces the preset's. A rung of a ``[ladder]`` takes that proxy to the rung's
    width (`trainers.presets.at_width`); a ``[law]`` with ``mup`` bases µP at the proxy's own
    width (`tuner.study.specs.law_spec`)."""
    m = spec.model
    if m.preset:
        args = preset(m.preset)
    else:
        size = preset(m.proxy or DEFAULT_PROXY)
        args = shrink(ModelArgs.from_json(m.full), dim=size.dim, n_layers=size.n_layers,
                      n_routed_experts=size.n_routed_experts,
                      n_activated_experts=size.n_activated_experts,
                      qk_nope_head_dim=size.qk_nope_head_dim, vocab_size=size.vocab_size)
    if m.group_score != "auto":
        args = dataclasses.replace(args, group_score=cast(GroupScore, m.group_score))
    vocab = data_vocab_size(spec.data)  # vocab_size, or the tokenizer's
    if vocab:
        args = dataclasses.replace(args, vocab_size=vocab)
    if spec.ladder.on:  # a rung of a ladder: its width, µP based at the bottom rung's
        base = spec.ladder.widths[0] if spec.ladder.mup else 0
        args = at_width(dataclasses.replace(args, mup_base_dim=base), spec.ladder.width)
    if spec.law.on and spec.law.mup and not args.mup_base_dim:  # µP based at this width
        args = dataclasses.replace(args, mup_base_dim=args.dim)
    return args


def proxy_width(spec: StudySpec) -> int:
    """The widest model (``dim``) any training of ``spec`` builds, as `resolve_model_args`
    builds it but without reading a file (a full config is shrunk to its proxy size's width):
    the preset's, or the proxy size's; a ladder's widest rung."""
    if spec.ladder.on:
        return max(spec.ladder.widths)
    m = spec.model
    return preset(m.preset or m.proxy or DEFAULT_PROXY).dim
