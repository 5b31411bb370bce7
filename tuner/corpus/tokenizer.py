"""A ``tokenizer.json`` (the Hugging Face ``tokenizers`` format, as transformers and torchtitan
load it), or a byte-level BPE vocabulary trained on the corpus itself (``"bpe:N"``).

``bpe:N`` trains GPT-2-style byte-level BPE (every byte in the initial alphabet, so no text is
unknown) with ``tokenizers``' `BpeTrainer` to N tokens, ``<|endoftext|>`` the end-of-document
token (id 0). The trained tokenizer is kept under ``$MOETUNE_CACHE/tokenizers``, keyed by the
corpus, the text field and N, so a machine trains it once.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.corpus.documents import CorpusError, documents

if TYPE_CHECKING:
    from tokenizers import Tokenizer

BPE_RE = re.compile(r"bpe:(\d+)")
BPE_EOD = "<|endoftext|>"
BPE_MIN_VOCAB = 257  # the 256 bytes and the end-of-document token
# 2**20: 8x DeepSeek-V3's 129,280 tokens; the trainer takes a machine-sized integer, and a
# vocabulary past this would be no proxy's (its embedding alone outweighs the model)
BPE_MAX_VOCAB = 2**20
# end-of-document tokens of common tokenizers, tried in order when data.eod_token is ""
EOD_CANDIDATES = ("<|endoftext|>", "<｜end▁of▁sentence｜>", "<|end_of_text|>", "</s>", "<eos>",
                  "<|im_end|>")


def bpe_size(spec: str) -> int | None:
    """N of ``"bpe:N"``; None when ``spec`` is a path.

    Raises:
        CorpusError: N outside [`BPE_MIN_VOCAB`, `BPE_MAX_VOCAB`].
    """
    m = BPE_RE.fullmatch(spec)
    if m is None:
        if spec.startswith("bpe:"):
            raise CorpusError("tokenizer", f"must be a tokenizer.json path or 'bpe:N' (N an "
                                           f"integer), but got {spec!r}.")
        return None
    n = int(m.group(1))
    if n < BPE_MIN_VOCAB:
        raise CorpusError("tokenizer", f"bpe:N needs N >= {BPE_MIN_VOCAB} (the 256 bytes and "
                                       f"{BPE_EOD}), but got {spec!r}.")
    if n > BPE_MAX_VOCAB:
        raise CorpusError("tokenizer", f"bpe:N needs N <= {BPE_MAX_VOCAB}, but got {spec!r}.")
    return n


def load_tokenizer(path: str) -> Tokenizer:
    """A ``tokenizer.json``, parsed.

    Raises:
        CorpusError: a missing file, or one the ``tokenizers`` library does not parse.
    """
    tokenizers = _library()
    if not Path(path).is_file():
        raise CorpusError("tokenizer", f"{path!r} does not exist (a tokenizer.json path or "
                                       "'bpe:N').")
    try:
        tok: Tokenizer = tokenizers.Tokenizer.from_file(path)
        return tok
    except Exception as e:  # noqa: BLE001 - the library raises plain Exception on bad JSON
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise CorpusError("tokenizer", f"{path!r} does not parse as a tokenizer.json "
                                       f"({first}).") from None


def vocab_size(tokenizer: Tokenizer) -> int:
    """The ids a tokenizer can emit: its largest id + 1 (added tokens included)."""
    return max(tokenizer.get_vocab(with_added_tokens=True).values()) + 1


def eod_id(tokenizer: Tokenizer, eod_token: str, *, where: str) -> int:
    """The id written after every document: ``eod_token``, or the first of `EOD_CANDIDATES`
    the tokenizer knows.

    Raises:
        CorpusError: the token named, or none of the candidates, is not in the vocabulary.
    """
    names = (eod_token,) if eod_token else EOD_CANDIDATES
    for name in names:
        i = tokenizer.token_to_id(name)
        if i is not None:
            return int(i)
    if eod_token:
        raise CorpusError("eod_token", f"{eod_token!r} is not a token of {where}.")
    raise CorpusError("eod_token", f"{where} has none of the end-of-document tokens "
                                   f"{list(EOD_CANDIDATES)}; name its own in data.eod_token.")


def train_bpe(corpus: str, *, text_field: str, size: int, corpus_key: str,
              progress: bool = False) -> tuple[Path, float]:
    """The path of a BPE tokenizer of ``size`` tokens trained on the corpus (kept; trained
    once per machine), and the seconds training took here (0.0 when it was kept)."""
    cache = cache_dir() / "tokenizers"
    key = hashlib.sha256(f"bpe-bytelevel-v1\0{size}\0{text_field}\0{corpus_key}".encode())
    out = cache / f"bpe{size}-{key.hexdigest()[:32]}.json"
    if out.is_file():
        return out, 0.0
    tokenizers = _library()
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=size, special_tokens=[BPE_EOD],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=progress)
    t0 = time.perf_counter()
    tok.train_from_iterator((text for text, _ in documents(corpus, text_field=text_field)),
                            trainer=trainer)
    seconds = time.perf_counter() - t0
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=cache, suffix=".tmp", delete=False) as tmp:
        tmp.write(tok.to_str())
    os.replace(tmp.name, out)
    (out.with_suffix(".meta.json")).write_text(json.dumps(
        {"corpus": corpus, "text_field": text_field, "vocab_size": size,
         "trained_vocab": tok.get_vocab_size(with_added_tokens=True), "seconds": seconds}))
    return out, seconds


def file_hash(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def cache_dir() -> Path:
    return Path(os.environ.get("MOETUNE_CACHE", Path.home() / ".cache" / "moetune"))


def _library() -> Any:
    try:
        import tokenizers
    except ImportError:
        raise CorpusError("tokenizer", "needs the 'tokenizers' package (pip install "
                                       "tokenizers, or pip install moetune[text]).") from None
    return tokenizers
