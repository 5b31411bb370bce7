"""Tokenize a text corpus once per machine into a Megatron indexed dataset, and load it.

The dataset is written as ``preprocess_data.py --append-eod`` writes one (a sequence per
document, the end-of-document id after each, uint16 ids below a vocabulary of 65,500 and int32
above), under ``$MOETUNE_CACHE/tokenized/<key>/corpus.{bin,idx}``, so every trial memory-maps
it (`trainers.data`) and the same files can feed the full run's ``--data-path``. The key hashes
the corpus (its files' paths, sizes and modification times; the stdlib corpus' sha256), the
tokenizer (its file's sha256), the text field, the end-of-document id and the ``tokenizers``
version: a changed file or tokenizer is a new key, and a trial that finds the key reads no text.

Documents are encoded in batches by the library's own threads (``encode_batch_fast``, Rust,
every core), with a progress bar over the corpus' bytes when asked. A file lock makes the
first process on a machine build the dataset and the others wait for it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainers import megatron
from trainers.data import Data, load_corpus, megatron_prefix, parse_blend, stdlib_corpus
from tuner.corpus.documents import STDLIB, CorpusError, documents, files
from tuner.corpus.tokenizer import (
    bpe_size,
    cache_dir,
    eod_id,
    file_hash,
    load_tokenizer,
    train_bpe,
    vocab_size,
)

if TYPE_CHECKING:
    from tokenizers import Tokenizer

BATCH_BYTES = 4 << 20  # text handed to the tokenizer's threads at a time
FORMAT = "megatron-v1"


@dataclass(frozen=True, kw_only=True)
class Tokenized:
    """A tokenized corpus in the cache: its Megatron prefix and what building it measured."""

    prefix: Path
    vocab_size: int
    meta: dict[str, Any]


def load(corpus: str, *, tokenizer: str = "", text_field: str = "text", eod_token: str = "",
         vocab: int = 0, max_bytes: int | None = None, progress: bool = False) -> Data:
    """The corpus a study trains on, by its ``[data]`` keys: without a tokenizer as
    `trainers.data.load_corpus` reads it; with one, a corpus of ids (a Megatron dataset, a
    ``.npy``) takes the tokenizer's vocabulary, and text (files, folders, ``.jsonl``,
    ``.parquet``, the stdlib corpus, or a blend of these) is tokenized (`tokenize`).

    Raises:
        CorpusError: naming the ``[data]`` key, the file, the rule and the value.
    """
    if not tokenizer:
        return _ids(corpus, vocab or None, max_bytes)
    blend = parse_blend(corpus)
    parts = [(1.0, corpus)] if blend is None else blend
    held = [_holds_ids(p) for _, p in parts]
    if any(held) and not all(held):
        raise CorpusError("corpus", f"the parts of a blend must all be text or all token ids "
                                    f"(Megatron datasets, .npy), but got {corpus!r}.")
    if all(held):
        if bpe_size(tokenizer):
            raise CorpusError("tokenizer", f"'bpe:N' trains on text, but the corpus {corpus!r} "
                                           "holds token ids; give its own tokenizer.json.")
        return _ids(corpus, _vocab(vocab, vocab_size(load_tokenizer(tokenizer)), tokenizer),
                    max_bytes)
    if blend is not None and bpe_size(tokenizer):
        raise CorpusError("tokenizer", f"'bpe:N' would train one vocabulary per part of the "
                                       f"blend {corpus!r}; train it on one corpus (a folder of "
                                       "the parts) or give a tokenizer.json.")
    _check_text_size(parts, max_bytes)
    # the vocabulary first: a spec that states too small a one writes nothing
    model_vocab = _vocab(vocab, bpe_size(tokenizer) or vocab_size(load_tokenizer(tokenizer)),
                         tokenizer)
    built = [tokenize(p, tokenizer=tokenizer, text_field=text_field, eod_token=eod_token,
                      progress=progress) for _, p in parts]
    spec = (str(built[0].prefix) if blend is None else
            " ".join(f"{w!r} {b.prefix}" for (w, _), b in zip(parts, built)))
    return _ids(spec, model_vocab, None)


def tokenize(corpus: str, *, tokenizer: str, text_field: str = "text", eod_token: str = "",
             progress: bool = False) -> Tokenized:
    """Tokenize ``corpus`` with ``tokenizer`` (a tokenizer.json path or ``"bpe:N"``) into the
    cache, or find it there."""
    key = _corpus_key(corpus)
    size = bpe_size(tokenizer)
    if size is not None:
        path, seconds = train_bpe(corpus, text_field=text_field, size=size, corpus_key=key,
                                  progress=progress)
        tok, tok_file, bpe = load_tokenizer(str(path)), str(path), {"bpe_train_s": seconds}
    else:
        tok, tok_file, bpe = load_tokenizer(tokenizer), tokenizer, {}
    eod = eod_id(tok, eod_token, where=f"tokenizer {tokenizer!r}")
    import tokenizers

    digest = hashlib.sha256("\0".join([FORMAT, key, file_hash(tok_file), text_field, str(eod),
                                       tokenizers.__version__]).encode()).hexdigest()
    folder = cache_dir() / "tokenized" / digest[:32]
    model_vocab = max(vocab_size(tok), size or 0)
    with _locked(folder.with_suffix(".lock")):
        meta_file = folder / "meta.json"
        if not meta_file.is_file():
            folder.mkdir(parents=True, exist_ok=True)
            try:
                meta = _write(corpus, tok, eod=eod, vocab=model_vocab, text_field=text_field,
                              out=folder / "corpus", progress=progress)
            except BaseException:
                folder.rmdir()  # the writer removed its files: bad input leaves nothing
                raise
            meta |= {"corpus": corpus, "tokenizer": tokenizer, "vocab_size": model_vocab,
                     "eod_id": eod, "text_field": text_field, **bpe}
            # last, and whole: its presence says the dataset is complete
            partial = meta_file.with_suffix(".tmp")
            partial.write_text(json.dumps(meta, indent=1))
            partial.replace(meta_file)
    meta = json.loads(meta_file.read_text())
    return Tokenized(prefix=folder / "corpus", vocab_size=model_vocab, meta=meta)


def _write(corpus: str, tok: Tokenizer, *, eod: int, vocab: int, text_field: str, out: Path,
           progress: bool) -> dict[str, Any]:
    """Encode every document into ``out``.bin/.idx; what it took."""
    import torch


    total = sum(p.stat().st_size for p in files(corpus)) or len(stdlib_corpus().tokens)
    bar = _bar(total, f"tokenizing {corpus}", progress)
    n_docs = n_tokens = 0
    t0 = time.perf_counter()
    with megatron.Writer(out, dtype=megatron.id_dtype(vocab)) as w:
        for batch, n_bytes in _batches(documents(corpus, text_field=text_field)):
            for enc in tok.encode_batch_fast(batch, add_special_tokens=False):
                w.add_document(torch.tensor(enc.ids + [eod], dtype=torch.int64))
                n_tokens += len(enc.ids) + 1
            n_docs += len(batch)
            bar.update(n_bytes)
        if n_docs == 0:
            raise CorpusError("corpus", f"{corpus!r} holds no documents.")
    bar.close()
    seconds = time.perf_counter() - t0
    return {"documents": n_docs, "tokens": n_tokens, "bytes": total, "seconds": seconds,
            "tokens_per_s": n_tokens / max(seconds, 1e-9)}


def _batches(docs: Iterator[tuple[str, int]]) -> Iterator[tuple[list[str], int]]:
    batch: list[str] = []
    size = 0
    for text, n_bytes in docs:
        batch.append(text)
        size += n_bytes
        if size >= BATCH_BYTES:
            yield batch, size
            batch, size = [], 0
    if batch:
        yield batch, size


def _bar(total: int, desc: str, on: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, disable=not on,
                file=sys.stderr, leave=False)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
        yield


def _corpus_key(corpus: str) -> str:
    """The corpus' identity without reading it: its files' paths, sizes and modification times
    (the stdlib corpus: its sha256, computed anyway)."""
    if corpus == STDLIB:
        return f"stdlib:{stdlib_corpus().hash}"
    h = hashlib.sha256()
    for p in files(corpus):
        st = p.stat()
        h.update(f"{p.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _holds_ids(corpus: str) -> bool:
    path = Path(corpus)
    return megatron_prefix(path) is not None or path.suffix == ".npy"


def _ids(spec: str, vocab: int | None, max_bytes: int | None) -> Data:
    try:
        return load_corpus(spec, vocab_size=vocab, max_bytes=max_bytes)
    except ValueError as e:
        raise CorpusError("corpus", str(e).removeprefix("corpus: ")) from None


def _vocab(stated: int, tokenizer_vocab: int, tokenizer: str) -> int:
    if stated and stated < tokenizer_vocab:
        raise CorpusError("vocab_size", f"must be 0 (the tokenizer's) or >= the tokenizer's "
                                        f"vocabulary ({tokenizer_vocab} for {tokenizer!r}), "
                                        f"but got {stated}.")
    return stated or tokenizer_vocab


def _check_text_size(parts: list[tuple[float, str]], max_bytes: int | None) -> None:
    if max_bytes is None:
        return
    size = sum(p.stat().st_size for _, c in parts for p in files(c))
    if size > max_bytes:
        raise CorpusError("corpus", f"{parts[0][1] if len(parts) == 1 else parts!r} holds "
                                    f"{size / 1e9:.3g} GB of text, more than the limit of "
                                    f"{max_bytes / 1e9:.3g} GB (data.max_corpus_gb); raise "
                                    "the limit or use a smaller corpus.")
