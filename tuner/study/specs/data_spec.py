"""``[data]``: the corpus a study trains on, its tokenizer and limits. `parse_data` checks
the section and reads its paths from the spec's folder; `check_corpus` (run by
`tuner.study.specs.spec.check_inputs`) loads the corpus as every trial will
(`tuner.corpus.section.load_data`) and checks it against the spec; `spec_error` is how a
corpus' error reads as the spec's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainers.blend import parse_blend
from trainers.config.validation import require
from tuner.corpus.documents import CorpusError
from tuner.corpus.section import load_data
from tuner.corpus.tokenizer import bpe_size, load_tokenizer, vocab_size
from tuner.study.specs.table import SpecError, absolute, section

STDLIB_CORPUS = "stdlib"  # load_corpus's name for the built-in corpus, not a path


@dataclass(frozen=True, kw_only=True)
class DataSection:
    corpus: str = STDLIB_CORPUS  # or an absolute path, once validated
    vocab_size: int = 0  # 0 = the corpus' own; else must equal it (256 for byte corpora)
    # a larger corpus is refused before any trial runs (every worker maps it)
    max_corpus_gb: float = 8.0
    # "" = none; a tokenizer.json path, or "bpe:N" (N tokens trained on the corpus): text is
    # tokenized once per machine into a cached Megatron dataset (tuner.corpus)
    tokenizer: str = ""
    text_field: str = "text"  # the field of a .jsonl line / the column of a .parquet file
    eod_token: str = ""  # "" = the tokenizer's end-of-document token, found by its name

    def __post_init__(self) -> None:
        """Checks its own values, as `StudySection` does; the paths are `parse_data`'s (they are
        read from the spec's folder) and the files `check_inputs`'."""
        require(isinstance(self.vocab_size, int) and self.vocab_size >= 0, "data.vocab_size",
                "must be an integer >= 0 (0 = the corpus' own)", self.vocab_size,
                error=SpecError)
        require(self.max_corpus_gb > 0, "data.max_corpus_gb", "must be > 0 (GB)",
                self.max_corpus_gb, error=SpecError)
        require(bool(self.text_field), "data.text_field", "must not be empty", self.text_field,
                error=SpecError)


def parse_data(table: Mapping[str, Any], base_dir: Path | None) -> DataSection:
    """``[data]``, its paths absolute (each path of a blend ``"W1 P1 W2 P2"``)."""

    data = section(DataSection, table, "data")  # checks its own values (__post_init__)
    try:
        bpe = bpe_size(data.tokenizer) if data.tokenizer else None
        blend = parse_blend(data.corpus)
    except CorpusError as e:
        raise spec_error(e) from None
    except ValueError as e:
        raise SpecError(f"data.corpus: {str(e).removeprefix('corpus: ')}", "data.corpus") from None
    if data.tokenizer and bpe is None:
        data = dataclasses.replace(data, tokenizer=absolute(data.tokenizer, base_dir))
    if data.corpus == STDLIB_CORPUS:
        return data
    if blend is not None:  # each path absolute; the weights as written
        words = data.corpus.split()
        return dataclasses.replace(data, corpus=" ".join(
            f"{w} {absolute(p, base_dir)}" for w, p in zip(words[0::2], words[1::2])))
    return dataclasses.replace(data, corpus=absolute(data.corpus, base_dir))


def data_vocab_size(data: DataSection) -> int:
    """The proxy's vocabulary that ``[data]`` states: ``vocab_size``, else the tokenizer's
    (N of ``bpe:N``; a tokenizer.json's largest id + 1), else 0 (the preset's own)."""

    if data.vocab_size or not data.tokenizer:
        return data.vocab_size
    bpe = bpe_size(data.tokenizer)
    if bpe is not None:
        return bpe

    return vocab_size(load_tokenizer(data.tokenizer))


def spec_error(e: CorpusError) -> SpecError:
    """A corpus' error as the spec's: ``data.<key>: <the file, the rule, the value>``."""
    return SpecError(f"data.{e.field}: {e}", f"data.{e.field}")


def check_corpus(data: DataSection, seq_len: int) -> None:
    """The corpus loads as every trial will load it, matches ``data.vocab_size`` and holds a
    sequence of ``seq_len``.

    Raises:
        SpecError: naming the ``[data]`` key, the rule and the value.
    """
    try:
        corpus = load_data(data, progress=True)
    except CorpusError as e:
        raise spec_error(e) from None
    # load_corpus ignores vocab_size for "stdlib" but rejects it for a text file; one rule
    # for every corpus: the model's vocabulary is the corpus' own
    require(data.vocab_size in (0, corpus.vocab_size), "data.vocab_size",
            f"must be 0 or the corpus' own vocabulary ({corpus.vocab_size} for "
            f"{data.corpus!r})", data.vocab_size, error=SpecError)
    try:
        corpus.check_fits(seq_len)
    except ValueError as e:
        raise SpecError(f"data.corpus: {e}", "data.corpus") from None
