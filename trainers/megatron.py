"""Megatron-LM indexed datasets (``PREFIX.bin`` + ``PREFIX.idx``), read and written with torch.

The layout, as ``megatron/core/datasets/indexed_dataset.py`` (NVIDIA/Megatron-LM at commit
d98e8a64dd, ``_IndexWriter`` / ``_IndexReader``) writes and reads it; all integers little-endian:

    .idx   9 bytes   b"MMIDIDX\\x00\\x00"
           uint64    version, 1
           uint8     dtype code of the ids in .bin (`DTYPE_CODES`)
           uint64    S, the number of sequences
           uint64    D, the number of document indices (documents + 1)
           S int32   sequence lengths, in tokens
           S int64   sequence pointers, byte offsets into .bin
           D int64   document indices: the sequence each document starts at; first 0, last S
           [S int8   sequence modes: multimodal datasets only]
    .bin   the sequences' ids back to back, in the dtype of the code

Megatron's builder writes uint16 ids for a vocabulary below 65,500 and int32 above
(``DType.optimal_dtype``); `id_dtype` makes the same choice. ``preprocess_data.py`` writes one
sequence per document (without sentence splitting) and, with ``--append-eod``, the EOD id at
the end of each.

Reading checks every rule the writer keeps (the header, the version, a defined integer code,
the sizes the counts imply, pointers that follow the lengths, document indices from 0 to S),
so a truncated or foreign file is an error naming the file, the rule and the value, never
tokens read at the wrong width.
"""

from __future__ import annotations

import ctypes
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import torch

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEADER_BYTES = len(MAGIC) + 8 + 1 + 8 + 8  # 34
# every code of Megatron's DType enum; the float ones hold no token ids
DTYPE_CODES: dict[int, tuple[str, torch.dtype]] = {
    1: ("uint8", torch.uint8), 2: ("int8", torch.int8), 3: ("int16", torch.int16),
    4: ("int32", torch.int32), 5: ("int64", torch.int64), 6: ("float64", torch.float64),
    7: ("float32", torch.float32), 8: ("uint16", torch.uint16),
}
INTEGER_CODES = (1, 2, 3, 4, 5, 8)
UINT16_VOCAB_LIMIT = 65500  # Megatron's DType.optimal_dtype: uint16 below, int32 from here


@dataclass(frozen=True, eq=False)
class IndexedIds:
    """An index read and checked, and the ids of its .bin memory-mapped."""

    tokens: torch.Tensor  # (N,) ids in the file's dtype, memory-mapped copy-on-write
    doc_starts: torch.Tensor  # (documents,) int64 token offset where each document starts
    dtype_name: str


def paths(prefix: Path) -> tuple[Path, Path]:
    """``(PREFIX.bin, PREFIX.idx)``."""
    return Path(f"{prefix}.bin"), Path(f"{prefix}.idx")


def read(prefix: Path) -> IndexedIds:
    """Read ``PREFIX.idx`` and map ``PREFIX.bin``.

    Raises:
        ValueError: a missing file, or an index that breaks a rule of the format (named).
    """
    bin_path, idx_path = paths(prefix)
    for p in (idx_path, bin_path):
        if not p.is_file():
            other = bin_path if p is idx_path else idx_path
            raise ValueError(f"corpus: {str(other)!r} has no {p.suffix} file beside it "
                             f"({str(p)!r} does not exist); a Megatron dataset is PREFIX.bin "
                             "+ PREFIX.idx.")
    code, lengths, doc_index = _read_index(idx_path)
    dtype_name, dtype = DTYPE_CODES[code]
    n_tokens = int(lengths.sum())
    size = bin_path.stat().st_size
    if size != n_tokens * dtype.itemsize:
        raise ValueError(f"corpus: {str(bin_path)!r} holds {size} bytes, but its index counts "
                         f"{n_tokens} {dtype_name} ids ({n_tokens * dtype.itemsize} bytes).")
    if n_tokens == 0:
        raise ValueError(f"corpus: Megatron dataset {str(prefix)!r} holds no tokens.")
    raw = torch.from_file(str(bin_path), shared=False, size=size, dtype=torch.uint8)
    seq_starts = torch.cumsum(lengths, 0) - lengths  # (S,) token offset of each sequence
    doc_starts = seq_starts[doc_index[:-1]] if len(doc_index) > 1 else torch.zeros(1).long()
    return IndexedIds(tokens=raw.view(dtype), doc_starts=doc_starts, dtype_name=dtype_name)


def _read_index(idx_path: Path) -> tuple[int, torch.Tensor, torch.Tensor]:
    """(dtype code, sequence lengths (S,) int64, document indices (D,) int64), checked."""
    data = idx_path.read_bytes()
    name = str(idx_path)
    if data[: len(MAGIC)] != MAGIC[: len(data)] or len(data) < len(MAGIC):
        raise ValueError(f"corpus: {name!r} is not a Megatron index: it must start with "
                         f"{MAGIC!r}, but starts with {data[:len(MAGIC)]!r}.")
    if len(data) < HEADER_BYTES:
        raise ValueError(f"corpus: {name!r} is truncated: {len(data)} bytes, fewer than the "
                         f"{HEADER_BYTES}-byte header.")
    version, code, n_seq, n_doc = struct.unpack_from("<QBQQ", data, len(MAGIC))
    if version != VERSION:
        raise ValueError(f"corpus: {name!r}: the index version must be {VERSION}, but got "
                         f"{version}.")
    if code not in DTYPE_CODES:
        raise ValueError(f"corpus: {name!r}: dtype code {code} is not one Megatron defines "
                         f"({_codes()}).")
    if code not in INTEGER_CODES:
        raise ValueError(f"corpus: {name!r}: dtype code {code} ({DTYPE_CODES[code][0]}) holds "
                         f"no token ids; they need an integer code ({_codes(INTEGER_CODES)}).")
    expected = HEADER_BYTES + 12 * n_seq + 8 * n_doc
    if len(data) not in (expected, expected + n_seq):  # + n_seq: multimodal sequence modes
        raise ValueError(f"corpus: {name!r} has {len(data)} bytes, but its header's counts "
                         f"({n_seq} sequences, {n_doc} document indices) need {expected} "
                         f"(or {expected + n_seq} with sequence modes): truncated or not an "
                         "index.")
    lengths = _array(data, HEADER_BYTES, n_seq, torch.int32).to(torch.int64)
    pointers = _array(data, HEADER_BYTES + 4 * n_seq, n_seq, torch.int64)
    doc_index = _array(data, HEADER_BYTES + 12 * n_seq, n_doc, torch.int64)
    _check_index(name, code, lengths, pointers, doc_index)
    return code, lengths, doc_index


def _array(data: bytes, offset: int, count: int, dtype: torch.dtype) -> torch.Tensor:
    # a copy of the slice: aligned whatever the offset, and writable
    return torch.frombuffer(bytearray(data[offset: offset + count * dtype.itemsize]),
                            dtype=dtype) if count else torch.zeros(0, dtype=dtype)


def _check_index(name: str, code: int, lengths: torch.Tensor, pointers: torch.Tensor,
                 doc_index: torch.Tensor) -> None:
    n_seq = len(lengths)
    if n_seq and int(lengths.min()) < 0:
        raise ValueError(f"corpus: {name!r}: sequence lengths must be >= 0, but one is "
                         f"{int(lengths.min())}.")
    itemsize = DTYPE_CODES[code][1].itemsize
    expected = (torch.cumsum(lengths, 0) - lengths) * itemsize
    if not torch.equal(pointers, expected):
        i = int((pointers != expected).nonzero()[0])
        raise ValueError(f"corpus: {name!r}: sequence pointers must follow the lengths (each "
                         f"sequence right after the one before), but sequence {i} starts at "
                         f"byte {int(pointers[i])}, not {int(expected[i])}.")
    ok = (len(doc_index) >= 1 and int(doc_index[0]) == 0 and int(doc_index[-1]) == n_seq
          and bool((doc_index[1:] >= doc_index[:-1]).all()))
    if not ok:
        shown = doc_index[:3].tolist() + (["..."] + doc_index[-1:].tolist()
                                           if len(doc_index) > 3 else [])
        raise ValueError(f"corpus: {name!r}: document indices must rise from 0 to the "
                         f"sequence count {n_seq}, but got {shown}.")


def _codes(codes: tuple[int, ...] | None = None) -> str:
    return ", ".join(f"{c} {DTYPE_CODES[c][0]}" for c in (codes or tuple(DTYPE_CODES)))


def _raw_bytes(t: torch.Tensor) -> bytes:
    """A CPU tensor's memory as bytes (little-endian on every machine torch ships for)."""
    t = t.detach().cpu().contiguous()
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size()) if t.numel() else b""


def id_dtype(vocab_size: int) -> torch.dtype:
    """The id dtype Megatron's builder picks for a vocabulary: uint16 below 65,500, else int32."""
    return torch.uint16 if vocab_size < UINT16_VOCAB_LIMIT else torch.int32


class Writer:
    """Write a Megatron indexed dataset one document at a time (one sequence per document).

    Both files are written under temporary names and renamed by `close`, so a reader never
    maps a half-written dataset; leaving the ``with`` block on an exception removes them.

        >>> with Writer(Path("/tmp/corpus"), dtype=torch.uint16) as w:  # doctest: +SKIP
        ...     w.add_document(torch.tensor([5, 6, 7]))
    """

    def __init__(self, prefix: Path, *, dtype: torch.dtype) -> None:
        codes = {t: c for c, (_, t) in DTYPE_CODES.items() if c in INTEGER_CODES}
        if dtype not in codes:
            raise ValueError(f"Writer: dtype must be an integer dtype Megatron defines "
                             f"({_codes(INTEGER_CODES)}), but got {dtype}.")
        self.code, self.dtype = codes[dtype], dtype
        self.bin_path, self.idx_path = paths(prefix)
        suffix = f".tmp{os.getpid()}"
        self._bin_tmp = self.bin_path.with_name(self.bin_path.name + suffix)
        self._idx_tmp = self.idx_path.with_name(self.idx_path.name + suffix)
        self._bin = self._bin_tmp.open("wb")
        self.lengths: list[int] = []

    def add_document(self, ids: torch.Tensor) -> None:
        """Append one document's ids (any integer tensor; cast to the dataset's dtype)."""
        self._bin.write(_raw_bytes(ids.to(self.dtype)))
        self.lengths.append(len(ids))

    def close(self) -> None:
        """Write the index and move both files to their names."""
        self._bin.close()
        lengths = torch.tensor(self.lengths, dtype=torch.int64)
        pointers = (torch.cumsum(lengths, 0) - lengths) * self.dtype.itemsize
        n = len(self.lengths)
        with self._idx_tmp.open("wb") as f:
            f.write(MAGIC + struct.pack("<QBQQ", VERSION, self.code, n, n + 1))
            f.write(_raw_bytes(lengths.to(torch.int32)))
            f.write(_raw_bytes(pointers))
            f.write(_raw_bytes(torch.arange(n + 1, dtype=torch.int64)))
        os.replace(self._bin_tmp, self.bin_path)
        os.replace(self._idx_tmp, self.idx_path)

    def abort(self) -> None:
        """Remove the temporary files; nothing is left under the dataset's names."""
        self._bin.close()
        for p in (self._bin_tmp, self._idx_tmp):
            p.unlink(missing_ok=True)

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()
