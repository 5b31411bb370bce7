"""Which files a spec submitted to the service may name: only those under the data roots the
operator allows (``moetune serve --data-root DIR``, repeated) or the model configs shipped with
moetune. A path anywhere else is refused before anything reads it, with an error that names the
field and the value sent and says nothing about the file (whether it exists, its size, its
keys), so a token holder cannot probe the service's disk.

The paths are checked at submit and again by the study's driver before it reads the files
(`check_spec_paths`). The path is resolved (symbolic links followed) on the service's machine
when the service runs its own Ray; on a cluster (``--address``) the files live on the nodes, so
the check is on the path as written (normalized: no ``..`` escapes), and a link inside a data
root is trusted.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

NOT_PATHS = ("", "stdlib")  # the built-in corpus, or none


class OutsideDataRoots(ValueError):
    """A spec path outside every data root; ``field`` names it."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


def spec_paths(table: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(field, path) for every file a spec table names: the corpus (each path of a blend), the
    tokenizer, the full model's config and a target given as a config file."""
    data = _section(table, "data")
    corpus = data.get("corpus")
    if isinstance(corpus, str) and corpus not in NOT_PATHS:
        for word in corpus.split():
            if not _is_number(word):  # a blend: 'W1 P1 W2 P2'
                yield "data.corpus", word
    tokenizer = data.get("tokenizer")
    if isinstance(tokenizer, str) and tokenizer and not tokenizer.startswith("bpe:"):
        yield "data.tokenizer", tokenizer
    model = _section(table, "model")
    if isinstance(model.get("full"), str) and model["full"]:
        yield "model.full", model["full"]
    full_run = _section(table, "full_run")
    if isinstance(full_run.get("target"), str) and is_path(full_run["target"]):
        yield "full_run.target", full_run["target"]


def check_spec_paths(table: dict[str, Any], roots: Sequence[Path], *, resolve: bool) -> None:
    """`check_path` on every file ``table`` names (`spec_paths`): at submit, and again by the
    study's driver just before it reads them, so a file swapped for a link out of the roots
    while the study waited in the queue is refused, not read.

    Raises:
        OutsideDataRoots: the first path outside every root.
    """
    for field, value in spec_paths(table):
        check_path(field, value, roots, resolve=resolve)


def is_path(target: str) -> bool:
    """Whether a target names a file (else a published config or a preset, by name)."""
    return "/" in target or "\\" in target or target.endswith(".json")


def check_path(field: str, value: str, roots: Sequence[Path], *, resolve: bool) -> None:
    """Refuse ``value`` unless it lies under one of ``roots``.

    Raises:
        OutsideDataRoots: it does not (the message says nothing about the file itself).
    """
    if "\0" in value:  # no file has such a name; os.path would raise on it
        raise OutsideDataRoots(f"{field}: must be a path without NUL bytes, but got "
                               f"{value!r}.", field)
    if not os.path.isabs(value):
        raise OutsideDataRoots(f"{field}: must be an absolute path on the cluster (the service "
                               f"has no spec folder to read a relative one from), but got "
                               f"{value!r}.", field)
    where = os.path.realpath(value) if resolve else os.path.normpath(value)
    for root in roots:
        base = os.path.realpath(root) if resolve else os.path.normpath(root)
        if os.path.commonpath([where, base]) == base:
            return
    raise OutsideDataRoots(f"{field}: must be a file under a data root this service allows "
                           f"(`moetune serve --data-root DIR`) or a config shipped with "
                           f"moetune, but got {value!r}.", field)


def _section(table: dict[str, Any], name: str) -> dict[str, Any]:
    got = table.get(name)
    return got if isinstance(got, dict) else {}


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True
