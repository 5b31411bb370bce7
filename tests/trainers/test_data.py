from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from trainers import load_corpus, stdlib_corpus
from trainers.data import TrainStream, validation_batches


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    """The folder cache and the per-file scans go under the test's own folder."""
    monkeypatch.setenv("MOETUNE_CACHE", str(tmp_path / "cache"))


def test_stdlib_corpus_is_deterministic_bytes():
    c = stdlib_corpus()
    assert c.vocab_size == 256 and len(c.tokens) > 1_000_000
    assert c.hash == load_corpus("stdlib").hash
    assert b"def " in bytes(c.tokens[:100_000])


def test_train_and_validation_do_not_overlap():
    c = stdlib_corpus()
    assert len(c.train_tokens) + len(c.val_tokens) == len(c.tokens)
    assert len(c.val_tokens) == pytest.approx(0.05 * len(c.tokens), rel=0.01)


def test_stream_is_seeded_and_independent_of_batching():
    c = stdlib_corpus()
    a = TrainStream(c, 32, seed=3)
    b = TrainStream(c, 32, seed=3)
    big = a.next_batch(8)
    small = torch.cat([b.next_batch(3), b.next_batch(5)])
    assert torch.equal(big, small)  # same windows whatever the batch sizes
    assert not torch.equal(TrainStream(c, 32, seed=4).next_batch(8), big)


def test_validation_batches_are_fixed():
    c = stdlib_corpus()
    v1 = validation_batches(c, 64, n_seqs=20, batch=8)
    v2 = validation_batches(c, 64, n_seqs=20, batch=8)
    assert [len(b) for b in v1] == [8, 8, 4]
    assert all(torch.equal(x, y) for x, y in zip(v1, v2))


def test_text_file_and_directory(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_bytes(b"hello " * 1000)
    (tmp_path / "d" / "b.txt").write_bytes(b"world " * 1000)
    one = load_corpus(tmp_path / "d" / "a.txt")
    both = load_corpus(tmp_path / "d")
    assert one.vocab_size == 256 and len(one.tokens) == 6000
    assert len(both.tokens) == 12000 and one.hash != both.hash


def test_token_file_npy(tmp_path):
    ids = (np.arange(5000) % 1000).astype(np.uint16)
    np.save(tmp_path / "t.npy", ids.astype(np.uint32))
    n = load_corpus(tmp_path / "t.npy", vocab_size=1000)
    assert torch.equal(n.tokens.to(torch.int64), torch.arange(5000) % 1000)
    assert n.tokens.dtype == torch.uint32


def test_npy_big_endian_and_2d_are_refused(tmp_path):
    np.save(tmp_path / "be.npy", np.arange(500, dtype=">u2"))
    np.save(tmp_path / "2d.npy", np.zeros((10, 50), dtype=np.uint16))
    (tmp_path / "fake.npy").write_bytes(b"not numpy at all")
    for name, message in (("be.npy", "dtype=>u2"), ("2d.npy", r"shape=\(10, 50\)"),
                          ("fake.npy", "bad magic")):
        with pytest.raises(ValueError, match=message):
            load_corpus(tmp_path / name, vocab_size=1000)


def test_trainers_run_without_numpy(tmp_path):
    """trainers/ needs torch alone: train on a token file with numpy made unimportable."""
    np.save(tmp_path / "t.npy", (np.arange(20000) % 300).astype(np.uint16))
    code = f"""
import sys
sys.modules["numpy"] = None  # any `import numpy` now fails
from trainers import Recipe, load_corpus, preset, train
corpus = load_corpus({str(tmp_path / "t.npy")!r}, vocab_size=300)
args = preset("debug")
r = train(args.__class__(**{{**args.__dict__, "vocab_size": 300}}),
          Recipe(batch_schedule="constant", batch_end=4, seq_len=64), data=corpus,
          token_budget=2048, eval_sequences=4, device="cpu")
print("val_loss", r.val_loss)
"""
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True,
                         text=True, cwd=Path(__file__).resolve().parents[2], timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert 0 < float(out.stdout.split()[-1]) < 10


@pytest.mark.parametrize(("make", "kwargs", "message"), [
    (lambda p: p / "missing.txt", {}, "does not exist"),
    (lambda p: (p / "e.txt").write_bytes(b"") and p / "e.txt" or p / "e.txt", {}, "is empty"),
    (lambda p: _ids(p, [1, 2, 3]), {}, "needs a positive vocab_size"),
    (lambda p: _ids(p, [1, 2, 300]), {"vocab_size": 256}, "holds id 300.*< vocab_size=256"),
    (lambda p: _ids(p, []), {"vocab_size": 256}, "is empty"),
    (lambda p: _odd_bytes(p), {"vocab_size": 256}, "not a multiple of 2"),
    (lambda p: _raw_bin(p), {"vocab_size": 256}, r"ids\.bin' has no \.idx file beside it"),
])
def test_bad_corpus_files_get_clear_errors(tmp_path, make, kwargs, message):
    with pytest.raises(ValueError, match=message):
        load_corpus(make(tmp_path), **kwargs)


def test_corpus_too_short_for_one_sequence(tmp_path):
    (tmp_path / "tiny.txt").write_bytes(b"x" * 100)
    c = load_corpus(tmp_path / "tiny.txt")
    with pytest.raises(ValueError, match=r"fewer than one sequence.*seq_len"):
        TrainStream(c, 128, seed=0)


def _ids(p, values):
    path = p / "ids.npy"
    np.save(path, np.asarray(values, dtype=np.uint16))
    return path


def _odd_bytes(p):
    path = p / "odd.npy"
    np.save(path, np.zeros(2, dtype=np.uint16))
    path.write_bytes(path.read_bytes() + b"\x01")
    return path


def _raw_bin(p):
    """Raw ids without an index: read as uint16 they could pass every check on wrong data (an
    int32 dataset's ids split in halves), so a .bin is only read with its .idx."""
    path = p / "ids.bin"
    np.asarray([1, 2, 3], dtype=np.uint16).tofile(path)
    return path
