"""Training corpora: the default one every Python install has, and user files.

A corpus is a flat array of token ids with a vocabulary size and a content hash. It splits
deterministically into train (first 95%) and validation (last 5%) parts. The training stream is
a seeded sequence of windows, so two runs with the same seed see the same windows in the same
order whatever their batch schedule: batches differ in size, not in data.

``max_bytes`` refuses a corpus larger than that before reading it (the spec's
``data.max_corpus_gb``).

Supported sources (``load_corpus(spec)``):
- ``"stdlib"``: the running Python's standard-library ``*.py`` source as bytes (vocab 256).
- a text file or a directory of files: raw bytes (vocab 256), memory-mapped: a folder is
  concatenated once per machine into a cache file (``$MOETUNE_CACHE/corpora``, default
  ``~/.cache/moetune/corpora``, keyed by the files' names, sizes and modification times), so
  the workers of a study share the page cache instead of each holding a copy.
- ``*.bin``: pre-tokenized ids, little-endian uint16 by default (nanoGPT/Megatron layout) or
  uint32 (``dtype="uint32"``), memory-mapped; ``vocab_size`` is required.
- ``*.npy``: a 1-D uint16/uint32 array, memory-mapped; ``vocab_size`` is required.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import struct
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

VAL_FRACTION = 0.05
STDLIB_MAX_BYTES = 8 << 20  # 8 MiB: plenty for proxies, read in well under a second
TOKEN_DTYPES = {"uint16": torch.uint16, "uint32": torch.uint32}
NPY_DESCR = {"<u2": "uint16", "<u4": "uint32"}  # .npy dtypes we read (little-endian, as written)


@dataclass(frozen=True, eq=False)
class Corpus:
    """Token ids (memory-mapped where possible), their vocabulary size, name and sha256 hash."""

    tokens: torch.Tensor  # 1-D uint8/uint16/uint32
    vocab_size: int
    name: str
    hash: str

    @property
    def n_val(self) -> int:
        return max(1, int(len(self.tokens) * VAL_FRACTION))

    @property
    def train_tokens(self) -> torch.Tensor:
        return self.tokens[: len(self.tokens) - self.n_val]

    @property
    def val_tokens(self) -> torch.Tensor:
        return self.tokens[len(self.tokens) - self.n_val:]

    def check_fits(self, seq_len: int) -> None:
        """Raise ValueError unless both splits hold at least one window of seq_len + 1 tokens."""
        for split, arr in (("train", self.train_tokens), ("validation", self.val_tokens)):
            if len(arr) < seq_len + 1:
                raise ValueError(
                    f"corpus {self.name!r}: the {split} split has {len(arr)} tokens, fewer than "
                    f"one sequence (seq_len + 1 = {seq_len + 1}); use a larger corpus or a "
                    f"shorter Recipe.seq_len.")


class TrainStream:
    """Seeded stream of training windows (seq_len + 1 tokens each): inputs and shifted targets."""

    def __init__(self, corpus: Corpus, seq_len: int, seed: int) -> None:
        corpus.check_fits(seq_len)
        self.tokens = corpus.train_tokens
        self.seq_len = seq_len
        self.rng = torch.Generator().manual_seed(seed)  # its own stream: model init is apart

    def next_batch(self, n: int) -> torch.Tensor:
        """The next n windows as a (n, seq_len + 1) int64 tensor."""
        starts = torch.randint(0, len(self.tokens) - self.seq_len, (n,), generator=self.rng)
        return _windows(self.tokens, starts.tolist(), self.seq_len + 1)


def validation_batches(corpus: Corpus, seq_len: int, n_seqs: int,
                       batch: int) -> list[torch.Tensor]:
    """Fixed held-out windows, evenly spaced over the validation split."""
    corpus.check_fits(seq_len)
    val = corpus.val_tokens
    span = len(val) - seq_len - 1
    starts = [span * i // max(1, n_seqs - 1) for i in range(n_seqs)]
    rows = _windows(val, starts, seq_len + 1)
    return [rows[i: i + batch] for i in range(0, n_seqs, batch)]


def _windows(tokens: torch.Tensor, starts: list[int], length: int) -> torch.Tensor:
    # slice, then widen: uint16/uint32 tensors support copies, not arithmetic or indexing
    return torch.stack([tokens[s: s + length].to(torch.int64) for s in starts])


def load_corpus(spec: str | Path | None = "stdlib", *, vocab_size: int | None = None,
                dtype: str = "uint16", max_bytes: int | None = None) -> Corpus:
    """Load a corpus by spec: "stdlib", a text file or directory, or a token .bin/.npy file.

    Raises:
        ValueError: missing/empty files, token files without vocab_size, ids >= vocab_size,
            more than ``max_bytes`` bytes.
    """
    if spec is None or str(spec) == "stdlib":
        return stdlib_corpus()
    path = Path(spec)
    if not path.exists():
        raise ValueError(f"corpus: path {str(path)!r} does not exist.")
    _check_size(path, max_bytes)
    if path.suffix in (".bin", ".npy") and path.is_file():
        return _token_file(path, vocab_size, dtype)
    if vocab_size not in (None, 256):
        raise ValueError(f"corpus: a text corpus is read as bytes (vocab 256), but got "
                         f"vocab_size={vocab_size}.")
    if path.is_dir():
        path, digest = _folder_file(path)
        return _mapped_bytes(path, name=str(spec), digest=digest)
    return _mapped_bytes(path, name=str(path), digest=None)


def corpus_bytes(path: Path) -> int:
    """The bytes a corpus file or folder holds (sizes only: nothing is read)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in _folder_files(path))


def _check_size(path: Path, max_bytes: int | None) -> None:
    if max_bytes is None:
        return
    size = corpus_bytes(path)
    if size > max_bytes:
        raise ValueError(f"corpus: {str(path)!r} holds {size / 1e9:.3g} GB, more than the "
                         f"limit of {max_bytes / 1e9:.3g} GB (data.max_corpus_gb); raise the "
                         "limit or use a smaller corpus.")


def _folder_files(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file())


def _folder_file(path: Path) -> tuple[Path, str]:
    """The folder's files concatenated into one cache file (built once), and its sha256."""
    files = _folder_files(path)
    key = hashlib.sha256()
    for p in files:
        st = p.stat()
        key.update(f"{p.relative_to(path)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    cache = Path(os.environ.get("MOETUNE_CACHE", Path.home() / ".cache" / "moetune"))
    out = cache / "corpora" / f"{key.hexdigest()}.bytes"
    digest_file = out.with_suffix(".sha256")
    if out.is_file() and digest_file.is_file():
        return out, digest_file.read_text().strip()
    out.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    # write under a temporary name, then rename: a worker never maps a half-written file
    with tempfile.NamedTemporaryFile(dir=out.parent, delete=False) as tmp:
        for p in files:
            with p.open("rb") as f:
                while block := f.read(1 << 20):
                    h.update(block)
                    tmp.write(block)
    digest_tmp = digest_file.with_name(f"{Path(tmp.name).name}.sha256")
    digest_tmp.write_text(h.hexdigest() + "\n")
    os.replace(tmp.name, out)
    os.replace(digest_tmp, digest_file)
    return out, h.hexdigest()


def _mapped_bytes(path: Path, *, name: str, digest: str | None) -> Corpus:
    """A byte corpus memory-mapped from ``path`` (copy-on-write: pages are shared until
    written, and nothing writes them)."""
    size = path.stat().st_size
    if size == 0:
        raise ValueError(f"corpus: {name!r} is empty.")
    tokens = torch.from_file(str(path), shared=False, size=size, dtype=torch.uint8)
    return Corpus(tokens=tokens, vocab_size=256, name=name, hash=digest or _file_hash(path))


@functools.lru_cache(maxsize=1)
def stdlib_corpus() -> Corpus:
    """The running Python's standard-library source, sorted by path, capped at 8 MiB."""
    root = Path(sysconfig.get_paths()["stdlib"])
    chunks, size = [], 0
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root).parts
        if rel[0] in ("site-packages", "dist-packages") or "test" in rel or "tests" in rel:
            continue
        data = f.read_bytes()
        chunks.append(data)
        size += len(data)
        if size >= STDLIB_MAX_BYTES:
            break
    return _bytes_corpus(b"".join(chunks)[:STDLIB_MAX_BYTES], name="stdlib")


def _bytes_corpus(data: bytes, name: str) -> Corpus:
    tokens = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return Corpus(tokens=tokens, vocab_size=256, name=name, hash=hashlib.sha256(data).hexdigest())


def _token_file(path: Path, vocab_size: int | None, dtype: str) -> Corpus:
    if vocab_size is None or vocab_size <= 0:
        raise ValueError(f"corpus: token file {str(path)!r} needs a positive vocab_size, "
                         f"but got vocab_size={vocab_size!r}.")
    if path.suffix == ".npy":
        offset, dtype = _npy_header(path)
    else:
        offset = 0
        if dtype not in TOKEN_DTYPES:
            raise ValueError(f"corpus: dtype must be one of {sorted(TOKEN_DTYPES)}, "
                             f"but got dtype={dtype!r}.")
    itemsize = TOKEN_DTYPES[dtype].itemsize
    n_bytes = path.stat().st_size - offset
    if n_bytes % itemsize:
        raise ValueError(f"corpus: {str(path)!r} has {n_bytes} bytes of ids, not a "
                         f"multiple of {itemsize} ({dtype}).")
    if n_bytes == 0:
        raise ValueError(f"corpus: token file {str(path)!r} is empty.")
    # memory-mapped, copy-on-write: pages are read when a window touches them
    raw = torch.from_file(str(path), shared=False, size=offset + n_bytes, dtype=torch.uint8)
    tokens = raw[offset:].view(TOKEN_DTYPES[dtype])
    chunk = 1 << 24
    top = max(int(tokens[i: i + chunk].to(torch.int64).max())
              for i in range(0, len(tokens), chunk))
    if top >= vocab_size:
        raise ValueError(f"corpus: token file {str(path)!r} holds id {top}, but ids must be "
                         f"< vocab_size={vocab_size}.")
    return Corpus(tokens=tokens, vocab_size=vocab_size, name=str(path), hash=_file_hash(path))


def _npy_header(path: Path) -> tuple[int, str]:
    """Data offset and id dtype of a .npy file holding a 1-D little-endian uint16/uint32 array."""
    with path.open("rb") as f:
        head = f.read(12)
        if len(head) < 10 or head[:6] != b"\x93NUMPY":
            raise ValueError(f"corpus: {str(path)!r} is not a .npy file (bad magic bytes).")
        if head[6] == 1:
            size, start = struct.unpack("<H", head[8:10])[0], 10
        else:
            size, start = struct.unpack("<I", head[8:12])[0], 12
        f.seek(start)
        try:
            header = ast.literal_eval(f.read(size).decode("latin1"))
        except (ValueError, SyntaxError, RecursionError, MemoryError) as e:
            raise ValueError(f"corpus: {str(path)!r} has an unreadable .npy header.") from e
    if not isinstance(header, dict):
        raise ValueError(f"corpus: {str(path)!r} has a .npy header that is not a dict (a "
                         f"{type(header).__name__}); it must hold a 1-D uint16/uint32 array.")
    descr, shape = header.get("descr"), header.get("shape")
    if descr not in NPY_DESCR or not isinstance(shape, tuple) or len(shape) != 1:
        raise ValueError(f"corpus: {str(path)!r} must hold a 1-D uint16 or uint32 array, "
                         f"but got dtype={descr}, shape={shape}.")
    return start + size, NPY_DESCR[descr]


def _file_hash(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
