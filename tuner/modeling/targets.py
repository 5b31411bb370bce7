"""Named full-run targets: DeepSeek's published model configs, shipped with the package.

``--target deepseek-v3-671b`` (or ``-236b``, ``-16b``) loads ``trainers/configs/config_*.json``,
copied unchanged from deepseek-ai/DeepSeek-V3 at `DEEPSEEK_V3_REF`, ``inference/configs/``.
Upstream's ``inference/model.py`` builds the gate's balancing bias only when ``dim == 7168``
(the 671B); each entry states that as our named field ``gate_bias``, so the 16B and 236B route
by softmax without a bias, as upstream runs them.

    >>> args, name = published_target("deepseek-v3-16b")  # doctest: +SKIP
    >>> args.score_func, args.gate_bias                       # doctest: +SKIP
    ('softmax', False)
"""

from __future__ import annotations

import dataclasses

from trainers.config.model_args import ModelArgs
from trainers.presets import PUBLISHED_CONFIGS

DEEPSEEK_V3_REF = "deepseek-ai/DeepSeek-V3@9b4e9788e4a3a731f7567338ed15d3ec549ce03b"

# name -> (config file, gate_bias as upstream's Gate builds it, short name used by consumers)
TARGETS: dict[str, tuple[str, bool, str]] = {
    "deepseek-v3-16b": ("config_16B.json", False, "16B"),
    "deepseek-v3-236b": ("config_236B.json", False, "236B"),
    "deepseek-v3-671b": ("config_671B.json", True, "671B"),
}


def published_target(name: str) -> tuple[ModelArgs, str]:
    """The `ModelArgs` of a named published config and its short name (``16B`` …).

    Raises:
        ValueError: unknown name; the message lists the valid ones.
    """
    if name.lower() not in TARGETS:
        raise ValueError(f"target: unknown name {name!r}; valid names are {sorted(TARGETS)}, "
                         "a config JSON path or a proxy preset.")
    file, gate_bias, short = TARGETS[name.lower()]
    args = ModelArgs.from_json(PUBLISHED_CONFIGS / file)
    return dataclasses.replace(args, gate_bias=gate_bias), short
