"""A team's own text and tokenizer: documents read from text, ``.jsonl`` and ``.parquet``,
tokenized once per machine into a Megatron indexed dataset (cached, memory-mapped by every
trial), with a ``tokenizer.json`` or a BPE vocabulary trained on the corpus (``"bpe:N"``).

`trainers` stays torch-only: it reads the result (`trainers.megatron`) and never a tokenizer.

    >>> corpus = load("docs/", tokenizer="bpe:8192", progress=True)  # doctest: +SKIP
    >>> corpus.vocab_size  # doctest: +SKIP
    8192
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# names imported on first use: the spec's pure checks use `bpe_size` without loading torch
_EXPORTS = {
    "Tokenized": "tuner.corpus.build", "load": "tuner.corpus.build",
    "tokenize": "tuner.corpus.build", "CorpusError": "tuner.corpus.documents",
    "bpe_size": "tuner.corpus.tokenizer", "load_tokenizer": "tuner.corpus.tokenizer",
    "vocab_size": "tuner.corpus.tokenizer",
}

__all__ = ["CorpusError", "Tokenized", "bpe_size", "load", "load_tokenizer", "tokenize",
           "vocab_size"]

if TYPE_CHECKING:
    from tuner.corpus.build import Tokenized, load, tokenize
    from tuner.corpus.documents import CorpusError
    from tuner.corpus.tokenizer import bpe_size, load_tokenizer, vocab_size


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'tuner.corpus' has no attribute {name!r}")
