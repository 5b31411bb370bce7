"""Megatron-LM indexed datasets and blends (trainers.megatron, trainers.data).

The files here are written by `megatron_files`, a writer that follows Megatron's own
``_IndexWriter`` (megatron/core/datasets/indexed_dataset.py at d98e8a64dd) with numpy and struct,
independent of the reader under test.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch

from trainers import load_corpus, megatron
from trainers.data import Blend, TrainStream, parse_blend, validation_batches

NUMPY_CODES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 8: np.uint16}


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MOETUNE_CACHE", str(tmp_path / "cache"))


def megatron_files(prefix, docs, code=8, *, header=megatron.MAGIC, version=1, modes=False):
    """``PREFIX.bin`` + ``PREFIX.idx`` as Megatron's builder writes them, one sequence a doc."""
    dtype = NUMPY_CODES.get(code, np.uint16)
    lengths = [len(d) for d in docs]
    pointers = np.concatenate([[0], np.cumsum(lengths)[:-1]]) * np.dtype(dtype).itemsize
    with open(f"{prefix}.bin", "wb") as f:
        for d in docs:
            f.write(np.asarray(d, dtype=dtype).tobytes())
    with open(f"{prefix}.idx", "wb") as f:
        f.write(header + struct.pack("<Q", version) + struct.pack("<B", code))
        f.write(struct.pack("<Q", len(docs)) + struct.pack("<Q", len(docs) + 1))
        f.write(np.array(lengths, dtype=np.int32).tobytes())
        f.write(np.array(pointers, dtype=np.int64).tobytes())
        f.write(np.arange(len(docs) + 1, dtype=np.int64).tobytes())
        if modes:
            f.write(np.zeros(len(docs), dtype=np.int8).tobytes())
    return prefix


def _docs(n_docs=40, length=100, vocab=120, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, size=length + i % 7).tolist() for i in range(n_docs)]


@pytest.mark.parametrize("code", sorted(NUMPY_CODES))
def test_every_integer_dtype_code_reads_the_ids_back(tmp_path, code):
    docs = _docs()
    prefix = megatron_files(tmp_path / "c", docs, code)
    corpus = load_corpus(str(prefix), vocab_size=120)
    assert corpus.tokens.dtype == megatron.DTYPE_CODES[code][1]
    assert corpus.tokens.to(torch.int64).tolist() == sum(docs, [])
    assert corpus.doc_starts.tolist() == np.cumsum([0] + [len(d) for d in docs[:-1]]).tolist()


def test_int32_ids_of_a_large_vocabulary_are_read_whole(tmp_path):
    """DeepSeek-V3's 129,280 ids need int32: read at their width, not as two uint16 halves."""
    docs = [[129279, 70000, 65535, 1] * 300]
    prefix = megatron_files(tmp_path / "big", docs, code=4)
    corpus = load_corpus(str(prefix), vocab_size=129280)
    assert corpus.tokens[:4].tolist() == [129279, 70000, 65535, 1]
    with pytest.raises(ValueError, match=r"holds id 129279, but ids must be < vocab_size=100000"):
        load_corpus(str(prefix), vocab_size=100000)


@pytest.mark.parametrize("suffix", ["", ".bin", ".idx"])
def test_the_prefix_or_either_file_names_the_dataset(tmp_path, suffix):
    megatron_files(tmp_path / "c", _docs())
    corpus = load_corpus(f"{tmp_path / 'c'}{suffix}", vocab_size=120)
    assert corpus.name == str(tmp_path / "c") and len(corpus.tokens) > 4000


def test_multimodal_sequence_modes_are_allowed(tmp_path):
    prefix = megatron_files(tmp_path / "c", _docs(), modes=True)
    assert len(load_corpus(str(prefix), vocab_size=120).doc_starts) == 40


def test_validation_starts_at_a_document(tmp_path):
    docs = _docs(n_docs=60)
    corpus = load_corpus(str(megatron_files(tmp_path / "c", docs)), vocab_size=120)
    cut = len(corpus.train_tokens)
    assert cut in corpus.doc_starts.tolist()  # no document in both splits
    assert 0.05 <= corpus.n_val / len(corpus.tokens) <= 0.1


def test_few_large_documents_split_at_the_token_mark(tmp_path):
    """Two documents: splitting between them would make half the corpus validation."""
    corpus = load_corpus(str(megatron_files(tmp_path / "c", [[1] * 3000, [2] * 3000])),
                         vocab_size=3)
    assert corpus.n_val == 300


def test_our_writer_writes_what_megatron_writes(tmp_path):
    docs = _docs()
    megatron_files(tmp_path / "theirs", docs, code=4)
    with megatron.Writer(tmp_path / "ours", dtype=torch.int32) as w:
        for d in docs:
            w.add_document(torch.tensor(d))
    for suffix in (".bin", ".idx"):
        ours = (tmp_path / f"ours{suffix}").read_bytes()
        assert ours == (tmp_path / f"theirs{suffix}").read_bytes()


def test_a_failed_write_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError), megatron.Writer(tmp_path / "c", dtype=torch.uint16) as w:
        w.add_document(torch.tensor([1, 2, 3]))
        raise RuntimeError("tokenizer failed")
    assert list(tmp_path.iterdir()) == []


def test_the_id_scan_and_hash_are_done_once_per_file(tmp_path, monkeypatch):
    prefix = megatron_files(tmp_path / "c", _docs())
    first = load_corpus(str(prefix), vocab_size=120)

    def no_rescan(*a, **k):
        raise AssertionError("the .bin was read again")

    monkeypatch.setattr("trainers.data._file_hash", no_rescan)
    monkeypatch.setattr("trainers.data._id_range", no_rescan)
    assert load_corpus(str(prefix), vocab_size=120).hash == first.hash


def _truncate(prefix, n):
    idx = prefix.with_name(prefix.name + ".idx")
    idx.write_bytes(idx.read_bytes()[:n])


def _patch(prefix, suffix, offset, data):
    path = prefix.with_name(prefix.name + suffix)
    raw = bytearray(path.read_bytes())
    raw[offset: offset + len(data)] = data
    path.write_bytes(bytes(raw))


BAD = [  # (make the dataset broken, the words the error must hold)
    ("bin without idx", lambda p: p.with_name("c.idx").unlink(),
     ["c.bin", "has no .idx file beside it"]),
    ("idx without bin", lambda p: p.with_name("c.bin").unlink(),
     ["c.idx", "has no .bin file beside it"]),
    ("truncated header", lambda p: _truncate(p, 20), ["c.idx", "truncated", "20 bytes"]),
    ("truncated arrays", lambda p: _truncate(p, 100), ["c.idx", "100 bytes", "truncated"]),
    ("foreign file", lambda p: _patch(p, ".idx", 0, b"PK\x03\x04zip"),
     ["c.idx", "not a Megatron index", "MMIDIDX"]),
    ("version 2", lambda p: _patch(p, ".idx", 9, struct.pack("<Q", 2)),
     ["c.idx", "version must be 1", "got 2"]),
    ("undefined dtype code", lambda p: _patch(p, ".idx", 17, b"\x09"),
     ["c.idx", "dtype code 9 is not one Megatron defines", "8 uint16"]),
    ("float dtype code", lambda p: _patch(p, ".idx", 17, b"\x06"),
     ["c.idx", "dtype code 6 (float64) holds no token ids"]),
    ("bin shorter than the index says", lambda p: _truncate_bin(p),
     ["c.bin", "holds", "its index counts"]),
    ("pointers off", lambda p: _patch(p, ".idx", 34 + 4 * 40 + 8, struct.pack("<q", 7)),
     ["c.idx", "pointers must follow the lengths", "sequence 1 starts at byte 7"]),
    ("document indices off", lambda p: _patch(p, ".idx", 34 + 12 * 40, struct.pack("<q", 3)),
     ["c.idx", "document indices must rise from 0", "[3, 1, 2"]),
]


def _truncate_bin(prefix):
    path = prefix.with_name("c.bin")
    path.write_bytes(path.read_bytes()[:-2])


@pytest.mark.parametrize(("case", "breaks", "words"), BAD, ids=[b[0] for b in BAD])
def test_broken_datasets_get_clear_errors(tmp_path, case, breaks, words):
    prefix = megatron_files(tmp_path / "c", _docs())
    breaks(prefix)
    with pytest.raises(ValueError) as e:
        load_corpus(str(prefix), vocab_size=120)
    for w in words:
        assert w in str(e.value), (case, str(e.value))


@pytest.mark.parametrize(("docs", "code", "vocab", "words"), [
    ([[1, 2, -3] * 100], 2, 120, ["holds id -3", "must be >= 0"]),
    ([[1, 2, 120] * 100], 8, 120, ["holds id 120", "< vocab_size=120"]),
    ([[1, 2, 3] * 100], 8, None, ["needs a positive vocab_size", "data.tokenizer"]),
])
def test_ids_outside_the_vocabulary_are_refused(tmp_path, docs, code, vocab, words):
    prefix = megatron_files(tmp_path / "c", docs, code)
    with pytest.raises(ValueError) as e:
        load_corpus(str(prefix), vocab_size=vocab)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_parse_blend_follows_megatrons_data_path():
    assert parse_blend("30 /a 70 /b") == [(0.3, "/a"), (0.7, "/b")]
    assert parse_blend("/a") is None and parse_blend("/my data/x") is None  # one path
    assert parse_blend("/a /b") is None  # no weights: not a blend
    with pytest.raises(ValueError, match=r"weights must be finite and > 0, but got -1"):
        parse_blend("1 /a -1 /b")


def test_a_blend_draws_windows_by_weight(tmp_path):
    megatron_files(tmp_path / "a", [[1] * 4000], 8)
    megatron_files(tmp_path / "b", [[2] * 4000], 8)
    blend = load_corpus(f"0.25 {tmp_path / 'a'} 0.75 {tmp_path / 'b'}", vocab_size=3)
    assert isinstance(blend, Blend) and blend.vocab_size == 3
    rows = TrainStream(blend, 16, seed=0).next_batch(400)
    assert (rows[:, 0] == 1).sum() == 100  # Megatron's greedy order: exactly the shares
    val = torch.cat(validation_batches(blend, 16, n_seqs=8, batch=4))
    assert sorted(val[:, 0].tolist()) == [1, 1, 2, 2, 2, 2, 2, 2]


def test_a_blend_stream_does_not_depend_on_batching(tmp_path):
    megatron_files(tmp_path / "a", _docs(seed=1), 8)
    megatron_files(tmp_path / "b", _docs(seed=2), 8)
    spec = f"1 {tmp_path / 'a'} 2 {tmp_path / 'b'}"
    a = TrainStream(load_corpus(spec, vocab_size=120), 32, seed=5)
    b = TrainStream(load_corpus(spec, vocab_size=120), 32, seed=5)
    assert torch.equal(a.next_batch(9), torch.cat([b.next_batch(4), b.next_batch(5)]))


def test_a_blend_of_byte_and_token_corpora_is_refused(tmp_path):
    megatron_files(tmp_path / "a", _docs(), 8)
    (tmp_path / "t.txt").write_bytes(b"hello " * 1000)
    with pytest.raises(ValueError, match=r"share one vocabulary, but got vocab sizes \[120, 256"):
        Blend(parts=(load_corpus(str(tmp_path / "a"), vocab_size=120),
                     load_corpus(str(tmp_path / "t.txt"))), weights=(0.5, 0.5))
