"""The documents of a text corpus, as strings, for a tokenizer.

One document is: a text file (a folder: each of its files, sorted by path, recursively); a line
of a ``.jsonl`` file (its ``text_field``); a row of a ``.parquet`` file (its ``text_field``
column); a file of the stdlib corpus. Bytes that are not UTF-8 are replaced (U+FFFD).

Bad input raises `CorpusError` naming the file, the rule and the value: a ``.jsonl`` line that
is not JSON or lacks the field, a parquet file without the column, a value that is not text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

STDLIB = "stdlib"
PARQUET_BATCH_ROWS = 4096


class CorpusError(ValueError):
    """A corpus or tokenizer breaks a rule; ``field`` is the ``[data]`` key it concerns."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def files(corpus: str) -> list[Path]:
    """The files a text corpus reads, in order (none for the stdlib corpus)."""
    if corpus == STDLIB:
        return []
    path = Path(corpus)
    if not path.exists():
        raise CorpusError("corpus", f"path {corpus!r} does not exist.")
    if path.is_file():
        return [path]
    found = sorted(p for p in path.rglob("*") if p.is_file())
    if not found:
        raise CorpusError("corpus", f"folder {corpus!r} holds no files (it is empty).")
    return found


def documents(corpus: str, *, text_field: str) -> Iterator[tuple[str, int]]:
    """``(document, bytes read for it)`` for every document of the corpus, in order."""
    if corpus == STDLIB:
        from trainers.data import stdlib_documents  # torch: only when text is read

        for data in stdlib_documents():
            yield data.decode("utf-8", errors="replace"), len(data)
        return
    for path in files(corpus):
        if path.suffix == ".jsonl":
            yield from _jsonl(path, text_field)
        elif path.suffix == ".parquet":
            yield from _parquet(path, text_field)
        else:
            data = path.read_bytes()
            yield data.decode("utf-8", errors="replace"), len(data)


def _jsonl(path: Path, field: str) -> Iterator[tuple[str, int]]:
    with path.open("rb") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as e:
                raise CorpusError("corpus", f"{str(path)!r} line {n} is not JSON ({e}).") from None
            if not isinstance(record, dict) or field not in record:
                keys = sorted(record) if isinstance(record, dict) else type(record).__name__
                raise CorpusError("text_field", f"{str(path)!r} line {n} has no field "
                                                f"{field!r} (data.text_field); it has {keys}.")
            yield _text(record[field], path, f"line {n}", field), len(line)


def _parquet(path: Path, field: str) -> Iterator[tuple[str, int]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as e:
        raise CorpusError("corpus", f"{str(path)!r} is not a parquet file ({e}).") from None
    names = table.schema_arrow.names
    if field not in names:
        raise CorpusError("text_field", f"{str(path)!r} has no column {field!r} "
                                        f"(data.text_field); its columns are {names}.")
    share = path.stat().st_size / max(1, table.metadata.num_rows)  # bytes read per row, about
    row = 0
    for batch in table.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=[field]):
        for value in batch.column(0).to_pylist():
            row += 1
            yield _text(value, path, f"row {row}", field), int(share)


def _text(value: object, path: Path, where: str, field: str) -> str:
    if not isinstance(value, str):
        raise CorpusError("text_field", f"{str(path)!r} {where}: field {field!r} must be a "
                                        f"string, but got {type(value).__name__} "
                                        f"{str(value)[:40]!r}.")
    return value
