"""Megatron's ``--data-path`` blend syntax, ``"W1 P1 W2 P2 ..."``: the standard library only, so
the spec's pure checks read it without torch."""

from __future__ import annotations

import math


def parse_blend(spec: str) -> list[tuple[float, str]] | None:
    """``"W1 P1 W2 P2 ..."`` as ``[(w1, p1), ...]`` with the weights normalised; None when
    ``spec`` is not a blend (one path, spaces allowed, or anything whose odd words are not all
    numbers, as Megatron's ``get_blend_from_list`` decides).

    Raises:
        ValueError: a weight that is not finite and > 0.
    """
    words = spec.split()
    if len(words) < 2 or len(words) % 2:
        return None
    try:
        weights = [float(w) for w in words[0::2]]
    except ValueError:
        return None
    for w in weights:
        if not (math.isfinite(w) and w > 0):
            raise ValueError(f"corpus: a blend's weights must be finite and > 0, but got {w} in "
                             f"{spec!r}.")
    total = sum(weights)
    return [(w / total, p) for w, p in zip(weights, words[1::2])]
