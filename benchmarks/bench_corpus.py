"""Corpus throughput: tokenizing text into the Megatron cache, training BPE, and a trial's
start-up on a large Megatron dataset versus the byte corpus.

    python benchmarks/bench_corpus.py --gb 1 [--keep]

Prints one JSON object. What each figure times:
- ``bpe8192_train_s``: `tuner.corpus.tokenizer.train_bpe` on the stdlib corpus (8 MiB), 8,192
  tokens; ``tokenize_tokens_per_s``: `tuner.corpus.tokenize` of the stdlib corpus with it
  (encode + write the .bin/.idx), over the tokens written. A fresh cache each, so both run.
  ``*_cpu_s`` and ``tokens_per_cpu_s``: the same in CPU seconds of the process (its threads
  included), which other load on the machine moves far less than the wall-clock figures.
- ``first_load_s``: the first `load_corpus` of a generated ``--gb`` GB uint16 Megatron dataset
  on this machine (reads the index, the sha256 and the id range of the .bin: done once per file
  version); ``trial_start_s``: what every later trial pays: `load_corpus` (cached facts) +
  the validation windows + the first training batch of 8 x 1,024; ``bytes_trial_start_s``:
  the same three steps on the stdlib byte corpus (its own load included: it reads 8 MiB).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

import torch


def _timed(fn):  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def tokenizing(cache: Path) -> dict:
    from tuner.corpus import tokenize
    from tuner.corpus.build import _corpus_key
    from tuner.corpus.tokenizer import train_bpe

    os.environ["MOETUNE_CACHE"] = str(cache)
    cpu0 = _cpu_s()
    (_, train_s) = train_bpe("stdlib", text_field="text", size=8192,
                             corpus_key=_corpus_key("stdlib"))
    cpu1 = _cpu_s()
    built = tokenize("stdlib", tokenizer="bpe:8192")
    cpu2 = _cpu_s()
    return {"bpe8192_train_s": round(train_s, 2), "bpe8192_train_cpu_s": round(cpu1 - cpu0, 2),
            "tokenize_cpu_s": round(cpu2 - cpu1, 2),
            "tokens_per_cpu_s": round(built.meta["tokens"] / (cpu2 - cpu1)),
            "load_average_1min": round(os.getloadavg()[0], 1), "tokens": built.meta["tokens"],
            "tokenize_s": round(built.meta["seconds"], 2),
            "tokenize_tokens_per_s": round(built.meta["tokens_per_s"]),
            "bytes_per_token": round(built.meta["bytes"] / built.meta["tokens"], 2)}


def _cpu_s() -> float:
    """CPU seconds of this process, its threads included (the tokenizer's Rust threads): a
    figure the other processes on a shared machine do not move, unlike wall time."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def generate(prefix: Path, gb: float) -> None:
    """Documents of 256-4,095 uint16 ids (vocab 32,000), ``gb`` GB of .bin, written in blocks."""
    from trainers.megatron import Writer

    g = torch.Generator().manual_seed(0)
    n_left = int(gb * 1e9) // 2
    with Writer(prefix, dtype=torch.uint16) as w:
        block = torch.randint(0, 32000, (1 << 24,), generator=g)
        while n_left > 0:
            n = min(n_left, int(torch.randint(256, 4096, (1,), generator=g)))
            at = int(torch.randint(0, len(block) - n, (1,), generator=g))
            w.add_document(block[at: at + n])
            n_left -= n


def start_up(spec: str, vocab: int | None) -> float:
    from trainers.data import TrainStream, load_corpus, stdlib_corpus, validation_batches

    stdlib_corpus.cache_clear()  # as in a fresh trial process
    t0 = time.perf_counter()
    corpus = load_corpus(spec, vocab_size=vocab)
    validation_batches(corpus, 1024, n_seqs=64, batch=16)
    TrainStream(corpus, 1024, seed=0).next_batch(8)
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gb", type=float, default=1.0, help="the Megatron dataset's size; 0 = "
                   "the tokenizing figures only")
    p.add_argument("--keep", action="store_true", help="keep the generated dataset")
    a = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_corpus_"))
    try:
        out = {"torch_threads": torch.get_num_threads(), "cpus": os.cpu_count()}
        out |= tokenizing(work / "cache_tok")
        if a.gb <= 0:
            print(json.dumps(out, indent=1))
            return
        os.environ["MOETUNE_CACHE"] = str(work / "cache_load")
        _, gen_s = _timed(lambda: generate(work / "big", a.gb))
        from trainers.data import load_corpus

        big, first = _timed(lambda: load_corpus(str(work / "big"), vocab_size=32000))
        out |= {"dataset_gb": round((work / "big.bin").stat().st_size / 1e9, 3),
                "documents": len(big.doc_starts), "generate_s": round(gen_s, 1),
                "first_load_s": round(first, 2)}
        out["trial_start_s"] = round(min(start_up(str(work / "big"), 32000) for _ in range(3)), 3)
        out["bytes_trial_start_s"] = round(min(start_up("stdlib", None) for _ in range(3)), 3)
        print(json.dumps(out, indent=1))
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
