"""Proxy fidelity: do 12 recipes rank the same at ``debug`` and at ``proxy-s``? (measured)

Reads ``fidelity.json`` (real trainings by ``record.py fidelity``: the same 12 recipes, same
token budget, at both presets) and reports the Spearman correlation of their final val_loss, the
top-3 overlap, and the recipes whose rank moves most.

    python benchmarks/search/fidelity.py
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))


def analyse(data: dict[str, Any]) -> dict[str, Any]:
    from tuner.study.workflows.validate import spearman

    def key(r: dict) -> tuple:
        return tuple(sorted(r["params"].items()))

    by = {name: {key(r): r for r in data["runs"] if r["preset"] == name}
          for name in ("debug", "proxy-s")}
    keys = [k for k in by["debug"] if k in by["proxy-s"]]
    small = [_loss(by["debug"][k]) for k in keys]
    big = [_loss(by["proxy-s"][k]) for k in keys]
    rank_s, rank_b = _ranks(small), _ranks(big)
    rows = sorted(({"params": dict(k), "debug": s, "proxy-s": b, "rank_debug": rs,
                    "rank_proxy_s": rb} for k, s, b, rs, rb
                   in zip(keys, small, big, rank_s, rank_b, strict=True)),
                  key=lambda r: r["rank_debug"])
    top3_s = {i for i, r in enumerate(rank_s) if r <= 3}
    top3_b = {i for i, r in enumerate(rank_b) if r <= 3}
    half = len(keys) // 2
    top_s = {i for i, r in enumerate(rank_s) if r <= half}
    top_b = {i for i, r in enumerate(rank_b) if r <= half}
    return {"n": len(keys), "spearman": spearman(small, big),
            "top3_overlap": len(top3_s & top3_b), "top_half_overlap": len(top_s & top_b),
            "top_half_spread_proxy_s": max(big[i] for i in top_b) - min(big[i] for i in top_b),
            "rows": rows,
            "token_budget": data["meta"]["token_budget"], "date": data["meta"]["date"]}


def _loss(run: dict) -> float:
    v = float(run["val_loss"])
    return v if math.isfinite(v) else math.inf


def _ranks(xs: list[float]) -> list[int]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    out = [0] * len(xs)
    for r, i in enumerate(order, 1):
        out[i] = r
    return out


def main() -> int:
    print(json.dumps(analyse(json.loads((HERE / "fidelity.json").read_text())), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
