"""Run one proxy training from the command line, with nothing but torch installed.

    python -m trainers --preset debug --tokens 200000
    python -m trainers --config config_671B.json --shrink-dim 256 --shrink-layers 6 \\
        --set lr=3e-3 --set precision=fp8 --json result.json

Recipe fields are set with --set NAME=VALUE (see `trainers.Recipe`); bad names or values exit 2
with the field named.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import time

from trainers.config.model_args import ModelArgs
from trainers.config.recipe import Recipe, field_names
from trainers.data import load_corpus
from trainers.loop import train
from trainers.presets import preset, preset_names, shrink


def _parse_set(items: list[str]) -> dict:
    out = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep:
            raise ValueError(f"--set: expected NAME=VALUE, but got {item!r}.")
        if name not in field_names():
            raise ValueError(f"--set: unknown Recipe field {name!r}; valid fields are "
                             f"{sorted(field_names())}.")
        try:
            out[name] = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            out[name] = raw  # a bare word such as fp8 or cosine
    return out


def _model_args(a: argparse.Namespace) -> ModelArgs:
    if a.config:
        full = ModelArgs.from_json(a.config)
        if a.shrink_dim:
            return shrink(full, dim=a.shrink_dim, n_layers=a.shrink_layers or 4)
        return full
    return preset(a.preset)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainers", description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="debug", help=f"one of {preset_names()}")
    p.add_argument("--config", help="a DeepSeek-style model config JSON instead of a preset")
    p.add_argument("--shrink-dim", type=int, help="shrink --config to this width")
    p.add_argument("--shrink-layers", type=int, help="... and this depth (default 4)")
    p.add_argument("--tokens", type=float, default=200_000, help="training token budget")
    p.add_argument("--eval-every", type=float, help="evaluation interval in tokens")
    p.add_argument("--corpus", default="stdlib",
                   help="stdlib, a text file/dir, a Megatron PREFIX (.bin + .idx), or .npy")
    p.add_argument("--vocab-size", type=int, help="vocabulary of a token-id corpus")
    p.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="a trainers.Recipe field, repeatable (e.g. --set lr=3e-3 "
                   "--set precision=bf16)")
    p.add_argument("--json", help="write the TrainResult here as JSON")
    a = p.parse_args(argv)
    try:
        args = _model_args(a)
        recipe = Recipe(**_parse_set(a.set))
        corpus = load_corpus(a.corpus, vocab_size=a.vocab_size)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    start = time.perf_counter()

    def on_eval(tokens: int, m: dict) -> None:
        print(f"{tokens:>12,} tokens  val_loss {m['val_loss']:.4f}  train_loss "
              f"{m['train_loss']:.4f}  max_vio {m['max_vio']:.2f}  {m['tokens_per_s']:,.0f} "
              f"tok/s  {time.perf_counter() - start:.0f}s", flush=True)

    try:
        result = train(args, recipe, data=corpus, token_budget=int(a.tokens), on_eval=on_eval,
                       eval_every_tokens=int(a.eval_every) if a.eval_every else None,
                       device=a.device)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    status = f"diverged at step {result.diverged_step}" if result.diverged else "done"
    print(f"{status}: val_loss {result.val_loss:.4f}, {result.tokens_trained:,} tokens in "
          f"{result.steps} steps, {result.tokens_per_s:,.0f} tok/s, peak memory "
          f"{result.peak_memory_bytes / 2**20:.0f} MiB ({result.peak_memory_method})"
          + {True: ", fp8 emulated", False: ", fp8 native", None: ""}[result.fp8_emulated])
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model_args": args.to_dict(), "recipe": recipe.to_dict(),
                       "result": result.to_dict()}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
