"""The corpus a spec's ``[data]`` section names, loaded as every trial loads it: the one place
``[data]``'s keys become `tuner.corpus.build.load`'s arguments, for the spec's input check and
the training call alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from tuner.corpus.documents import CorpusError

if TYPE_CHECKING:
    from trainers.data import Data


class DataKeys(Protocol):
    """The ``[data]`` keys a load reads (`tuner.study.specs.data_spec.DataSection` has them)."""

    @property
    def corpus(self) -> str: ...
    @property
    def tokenizer(self) -> str: ...
    @property
    def text_field(self) -> str: ...
    @property
    def eod_token(self) -> str: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def max_corpus_gb(self) -> float: ...


def load_data(data: DataKeys, *, progress: bool = False) -> Data:
    """The corpus ``[data]`` names, as every trial loads it (`tuner.corpus.build.load`: text
    with a tokenizer is tokenized into the cache the first time on a machine, with a progress
    bar when ``progress``); a `trainers.data.Corpus` or `Blend`.

    Raises:
        CorpusError: ``.field`` the ``[data]`` key, the message the file, the rule and the
            value (a reader's own ValueError or OSError is the ``corpus`` key's).
    """
    from tuner.corpus.build import load  # torch: only commands that load a corpus need it

    try:
        return load(data.corpus, tokenizer=data.tokenizer, text_field=data.text_field,
                    eod_token=data.eod_token, vocab=data.vocab_size,
                    max_bytes=max_corpus_bytes(data), progress=progress)
    except CorpusError as e:
        raise CorpusError(e.field, str(e).removeprefix("corpus: ")) from None
    except (ValueError, OSError) as e:
        raise CorpusError("corpus", str(e).removeprefix("corpus: ")) from None


def max_corpus_bytes(data: DataKeys) -> int:
    """``data.max_corpus_gb`` in bytes (GB = 10**9 bytes)."""
    return int(data.max_corpus_gb * 1e9)
