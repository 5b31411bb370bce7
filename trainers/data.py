"""Training corpora: the default one every Python install has, and user files.

A corpus is a flat array of token ids with a vocabulary size and a content hash. It splits
deterministically into train (first 95%) and validation (last 5%) parts; a corpus that knows
its documents (a Megatron dataset) splits at the last document start before the 95% mark, as
Megatron's ``--split`` splits by documents, so no document is in both parts (unless that would
more than double the validation part: then at the 95% token). The training stream is a seeded
sequence of windows, so two runs with the same seed see the same windows in the same order
whatever their batch schedule: batches differ in size, not in data.

Windows cross document boundaries, as the samples of Megatron's ``GPTDataset`` do (it cuts
fixed-length samples from the concatenated documents; ``reset_attention_mask`` and
``reset_position_ids`` are off by default): a proxy sees the data the full run will see. The
boundaries are marked by the EOD id the dataset holds between documents (what
``preprocess_data.py --append-eod`` writes, and what `tuner.corpus` writes when it tokenizes).

``max_bytes`` refuses a corpus larger than that before reading it (the spec's
``data.max_corpus_gb``). Whole-file work (the sha256, the id range check) is done once per
file version on a machine and kept in the cache (keyed by the file's path, size and
modification time), so a trial maps a large corpus without reading it.

Supported sources (``load_corpus(spec)``):
- ``"stdlib"``: the running Python's standard-library ``*.py`` source as bytes (vocab 256).
- a text file or a directory of files: raw bytes (vocab 256), memory-mapped: a folder is
  concatenated once per machine into a cache file (``$MOETUNE_CACHE/corpora``, default
  ``~/.cache/moetune/corpora``, keyed by the files' names, sizes and modification times), so
  the workers of a study share the page cache instead of each holding a copy.
- a Megatron-LM indexed dataset: ``PREFIX`` (or ``PREFIX.bin`` / ``PREFIX.idx``) naming
  ``PREFIX.bin`` + ``PREFIX.idx`` (`trainers.megatron`), any integer dtype, memory-mapped;
  ``vocab_size`` is required.
- ``*.npy``: a 1-D uint16/uint32 array, memory-mapped; ``vocab_size`` is required.
- a blend, Megatron's ``--data-path`` syntax: ``"W1 PATH1 W2 PATH2 ..."`` (weights > 0,
  normalised to sum 1; paths without spaces), a `Blend` whose windows come from each part in
  proportion to its weight, in the order Megatron's ``build_blending_indices`` picks them.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import struct
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from trainers import megatron
from trainers.blend import parse_blend

VAL_FRACTION = 0.05
STDLIB_MAX_BYTES = 8 << 20  # 8 MiB: plenty for proxies, read in well under a second
TOKEN_DTYPES = {"uint16": torch.uint16, "uint32": torch.uint32}
NPY_DESCR = {"<u2": "uint16", "<u4": "uint32"}  # .npy dtypes we read (little-endian, as written)
SCAN_CHUNK = 1 << 24  # ids widened to int64 at a time by the range check


@dataclass(frozen=True, eq=False)
class Corpus:
    """Token ids (memory-mapped where possible), their vocabulary size, name and sha256 hash;
    ``doc_starts`` (int64 token offsets, ascending, first 0) when the source knows its
    documents."""

    tokens: torch.Tensor  # 1-D uint8/uint16/uint32 or a Megatron integer dtype
    vocab_size: int
    name: str
    hash: str
    doc_starts: torch.Tensor | None = None

    @functools.cached_property
    def n_val(self) -> int:
        n = len(self.tokens)
        want = max(1, int(n * VAL_FRACTION))
        if self.doc_starts is None or len(self.doc_starts) < 2:
            return want
        # the last document start at or before the 95% mark
        i = int(torch.searchsorted(self.doc_starts, n - want, right=True)) - 1
        cut = int(self.doc_starts[max(i, 0)])
        return want if cut == 0 or n - cut > 2 * want else n - cut

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


@dataclass(frozen=True, eq=False)
class Blend:
    """Corpora blended by weight, as Megatron's ``--data-path W1 P1 W2 P2`` blends them."""

    parts: tuple[Corpus, ...]
    weights: tuple[float, ...]  # normalised: they sum to 1

    def __post_init__(self) -> None:
        vocabs = sorted({p.vocab_size for p in self.parts})
        if len(vocabs) > 1:
            raise ValueError(f"corpus: the parts of a blend must share one vocabulary, but got "
                             f"vocab sizes {vocabs}.")

    @property
    def vocab_size(self) -> int:
        return self.parts[0].vocab_size

    @property
    def name(self) -> str:
        return " ".join(f"{w:g} {p.name}" for w, p in zip(self.weights, self.parts))

    @property
    def hash(self) -> str:
        text = "\n".join(f"{w!r} {p.hash}" for w, p in zip(self.weights, self.parts))
        return hashlib.sha256(text.encode()).hexdigest()

    def check_fits(self, seq_len: int) -> None:
        for part in self.parts:
            part.check_fits(seq_len)


Data = Corpus | Blend


def _sources(data: Data) -> tuple[tuple[Corpus, ...], tuple[float, ...]]:
    return (data.parts, data.weights) if isinstance(data, Blend) else ((data,), (1.0,))


class _BlendOrder:
    """Which part each next window comes from: Megatron's ``build_blending_indices`` (helpers.cpp
    at d98e8a64dd): sample i goes to the part furthest below its share, w_j * max(i, 1) -
    count_j, the first such part on ties."""

    def __init__(self, weights: tuple[float, ...]) -> None:
        self.weights, self.counts, self.i = weights, [0] * len(weights), 0

    def take(self, n: int) -> list[int]:
        picks = []
        for _ in range(n):
            at = max(self.i, 1)
            errors = [w * at - c for w, c in zip(self.weights, self.counts)]
            j = errors.index(max(errors))
            self.counts[j] += 1
            self.i += 1
            picks.append(j)
        return picks


class TrainStream:
    """Seeded stream of training windows (seq_len + 1 tokens each): inputs and shifted targets.

    A blend draws each part's window starts from that part's own generator, so the windows do
    not depend on how the stream is cut into batches."""

    def __init__(self, corpus: Data, seq_len: int, seed: int) -> None:
        corpus.check_fits(seq_len)
        parts, weights = _sources(corpus)
        self.parts = [p.train_tokens for p in parts]
        self.tokens = self.parts[0]
        self.seq_len = seq_len
        self.order = _BlendOrder(weights)
        # their own streams: model init is apart; part 0 on the seed itself
        self.rngs = [torch.Generator().manual_seed(_part_seed(seed, j))
                     for j in range(len(parts))]
        self.rng = self.rngs[0]

    def next_batch(self, n: int) -> torch.Tensor:
        """The next n windows as a (n, seq_len + 1) int64 tensor."""
        if len(self.parts) == 1:
            return self._draw(0, n)
        picks = self.order.take(n)
        rows = torch.empty(n, self.seq_len + 1, dtype=torch.int64)
        for j in set(picks):
            at = [i for i, p in enumerate(picks) if p == j]
            rows[at] = self._draw(j, len(at))
        return rows

    def _draw(self, j: int, n: int) -> torch.Tensor:
        tokens = self.parts[j]
        starts = torch.randint(0, len(tokens) - self.seq_len, (n,), generator=self.rngs[j])
        return _windows(tokens, starts.tolist(), self.seq_len + 1)


def _part_seed(seed: int, j: int) -> int:
    if j == 0:
        return seed
    digest = hashlib.sha256(f"{seed}:{j}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def validation_batches(corpus: Data, seq_len: int, n_seqs: int,
                       batch: int) -> list[torch.Tensor]:
    """Fixed held-out windows, evenly spaced over the validation split (over each part's, in
    the blend's order, for a blend)."""
    corpus.check_fits(seq_len)
    parts, weights = _sources(corpus)
    picks = _BlendOrder(weights).take(n_seqs)
    rows = torch.empty(n_seqs, seq_len + 1, dtype=torch.int64)
    for j, part in enumerate(parts):
        at = [i for i, p in enumerate(picks) if p == j]
        if not at:
            continue
        val = part.val_tokens
        span = len(val) - seq_len - 1
        starts = [span * i // max(1, len(at) - 1) for i in range(len(at))]
        rows[at] = _windows(val, starts, seq_len + 1)
    return [rows[i: i + batch] for i in range(0, n_seqs, batch)]


def _windows(tokens: torch.Tensor, starts: list[int], length: int) -> torch.Tensor:
    # slice, then widen: uint16/uint32 tensors support copies, not arithmetic or indexing
    return torch.stack([tokens[s: s + length].to(torch.int64) for s in starts])


def load_corpus(spec: str | Path | None = "stdlib", *, vocab_size: int | None = None,
                max_bytes: int | None = None) -> Data:
    """Load a corpus by spec: "stdlib", a text file or directory, a Megatron dataset, a token
    .npy file, or a blend of these (``"W1 P1 W2 P2"``).

    Raises:
        ValueError: missing/empty files, a .bin without its .idx, a broken index, token files
            without vocab_size, ids outside [0, vocab_size), more than ``max_bytes`` bytes.
    """
    if spec is None or str(spec) == "stdlib":
        return stdlib_corpus()
    blend = parse_blend(spec) if isinstance(spec, str) else None
    if blend is None:
        return _one(Path(spec), vocab_size, max_bytes)
    _check_total_size([Path(p) for _, p in blend], max_bytes)
    return Blend(parts=tuple(_one(Path(p), vocab_size, None) for _, p in blend),
                 weights=tuple(w for w, _ in blend))


def _one(path: Path, vocab_size: int | None, max_bytes: int | None) -> Corpus:
    prefix = megatron_prefix(path)
    if prefix is not None:
        _check_total_size([prefix], max_bytes)
        return _megatron_corpus(prefix, vocab_size)
    if not path.exists():
        raise ValueError(f"corpus: path {str(path)!r} does not exist.")
    _check_total_size([path], max_bytes)
    if path.suffix == ".npy" and path.is_file():
        return _token_file(path, vocab_size)
    if vocab_size not in (None, 256):
        raise ValueError(f"corpus: a text corpus is read as bytes (vocab 256), but got "
                         f"vocab_size={vocab_size}.")
    if path.is_dir():
        file, digest = _folder_file(path)
        return _mapped_bytes(file, name=str(path), digest=digest)
    return _mapped_bytes(path, name=str(path), digest=None)


def megatron_prefix(path: Path) -> Path | None:
    """The prefix of the Megatron dataset ``path`` names, or None: ``PREFIX.bin`` or
    ``PREFIX.idx`` (a file), or ``PREFIX`` itself when no such path exists but one of the two
    files does."""
    if path.suffix in (".bin", ".idx") and path.is_file():
        return path.with_suffix("")
    if not path.exists() and any(p.exists() for p in megatron.paths(path)):
        return path
    return None


def corpus_bytes(path: Path) -> int:
    """The bytes a corpus file, folder or Megatron dataset holds (sizes only: nothing is
    read)."""
    prefix = megatron_prefix(path)
    if prefix is not None:
        return sum(p.stat().st_size for p in megatron.paths(prefix) if p.is_file())
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in _folder_files(path))


def _check_total_size(paths: list[Path], max_bytes: int | None) -> None:
    if max_bytes is None:
        return
    size = sum(corpus_bytes(p) for p in paths if p.exists() or megatron_prefix(p))
    if size > max_bytes:
        shown = str(paths[0]) if len(paths) == 1 else f"the blend of {[str(p) for p in paths]}"
        raise ValueError(f"corpus: {shown!r} holds {size / 1e9:.3g} GB, more than the limit "
                         f"of {max_bytes / 1e9:.3g} GB (data.max_corpus_gb); raise the limit "
                         "or use a smaller corpus.")


def _folder_files(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file())


def _folder_file(path: Path) -> tuple[Path, str]:
    """The folder's files concatenated into one cache file (built once), and its sha256."""
    files = _folder_files(path)
    key = hashlib.sha256()
    for p in files:
        st = p.stat()
        key.update(f"{p.relative_to(path)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    out = _cache_dir() / "corpora" / f"{key.hexdigest()}.bytes"
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
    return Corpus(tokens=tokens, vocab_size=256, name=name,
                  hash=digest or _file_facts(path)["sha256"])


@functools.lru_cache(maxsize=1)
def stdlib_corpus() -> Corpus:
    """The running Python's standard-library source, sorted by path, capped at 8 MiB."""
    return _bytes_corpus(b"".join(stdlib_documents()), name="stdlib")


def stdlib_documents() -> list[bytes]:
    """The files of the stdlib corpus, in order, the last one cut at the 8 MiB cap."""
    root = Path(sysconfig.get_paths()["stdlib"])
    chunks, size = [], 0
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root).parts
        if rel[0] in ("site-packages", "dist-packages") or "test" in rel or "tests" in rel:
            continue
        data = f.read_bytes()[: STDLIB_MAX_BYTES - size]
        chunks.append(data)
        size += len(data)
        if size >= STDLIB_MAX_BYTES:
            break
    return chunks


def _bytes_corpus(data: bytes, name: str) -> Corpus:
    tokens = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return Corpus(tokens=tokens, vocab_size=256, name=name, hash=hashlib.sha256(data).hexdigest())


def _token_file(path: Path, vocab_size: int | None) -> Corpus:
    vocab = _need_vocab(f"token file {str(path)!r}", vocab_size)
    offset, dtype = _npy_header(path)
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
    facts = _file_facts(path, tokens)
    _check_ids(str(path), facts, vocab)
    return Corpus(tokens=tokens, vocab_size=vocab, name=str(path), hash=facts["sha256"])


def _megatron_corpus(prefix: Path, vocab_size: int | None) -> Corpus:
    bin_path, idx_path = megatron.paths(prefix)
    vocab = _need_vocab(f"Megatron dataset {str(bin_path)!r}", vocab_size)
    ids = megatron.read(prefix)
    facts = _file_facts(bin_path, ids.tokens)
    _check_ids(str(bin_path), facts, vocab)
    index_hash = hashlib.sha256(idx_path.read_bytes()).hexdigest()
    digest = hashlib.sha256(f"{index_hash}\n{facts['sha256']}".encode()).hexdigest()
    return Corpus(tokens=ids.tokens, vocab_size=vocab, name=str(prefix), hash=digest,
                  doc_starts=ids.doc_starts)


def _need_vocab(what: str, vocab_size: int | None) -> int:
    if vocab_size is None or vocab_size <= 0:
        raise ValueError(f"corpus: {what} holds token ids and needs a positive vocab_size "
                         f"(data.vocab_size, or data.tokenizer to take it from), but got "
                         f"vocab_size={vocab_size!r}.")
    return vocab_size


def _check_ids(name: str, facts: dict, vocab_size: int) -> None:
    if facts["min"] < 0:
        raise ValueError(f"corpus: {name!r} holds id {facts['min']}, but ids must be >= 0.")
    if facts["max"] >= vocab_size:
        raise ValueError(f"corpus: {name!r} holds id {facts['max']}, but ids must be "
                         f"< vocab_size={vocab_size}.")


def _file_facts(path: Path, tokens: torch.Tensor | None = None) -> dict:
    """The file's sha256 (and, given its ids, their min and max), computed once per file
    version on this machine: kept under ``$MOETUNE_CACHE/scans``, keyed by the resolved path,
    size and modification time."""
    st = path.stat()
    key = hashlib.sha256(f"{path.resolve()}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    kept = _cache_dir() / "scans" / f"{key.hexdigest()}.json"
    try:
        facts: dict = json.loads(kept.read_text())
        if tokens is None or "max" in facts:
            return facts
    except (OSError, ValueError):
        pass
    facts = {"sha256": _file_hash(path)}
    if tokens is not None:
        lo, hi = _id_range(tokens)
        facts |= {"min": lo, "max": hi}
    try:  # a read-only cache only costs the scan again
        kept.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=kept.parent, delete=False) as tmp:
            tmp.write(json.dumps(facts))
        os.replace(tmp.name, kept)
    except OSError:
        pass
    return facts


def _id_range(tokens: torch.Tensor) -> tuple[int, int]:
    # widened a chunk at a time (uint16 has no min/max kernels); int32 holds every id of a
    # dtype up to 32 bits but uint32, and is twice as fast to scan as int64
    wide = torch.int64 if tokens.dtype in (torch.int64, torch.uint32) else torch.int32
    lo, hi = 0, 0
    for i in range(0, len(tokens), SCAN_CHUNK):
        c_lo, c_hi = torch.aminmax(tokens[i: i + SCAN_CHUNK].to(wide))
        lo, hi = min(lo, int(c_lo)), max(hi, int(c_hi))
    return lo, hi


def _cache_dir() -> Path:
    return Path(os.environ.get("MOETUNE_CACHE", Path.home() / ".cache" / "moetune"))


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
