"""Which files a spec submitted to the service may name: only those under the data roots the
operator allows (``moetune serve --data-root DIR``, repeated) or the model configs shipped with
moetune. A path anywhere else is refused before anything reads it, with an error that names the
field and the value sent and says nothing about the file (whether it exists, its size, its
keys), so a token holder cannot probe the service's disk.

The paths are checked at submit and again by the study's driver before it reads the files
(`check_spec_paths`). The path is resolved (symbolic links followed) on the service's machine
when the service runs its own Ray, and so is every file reading it may open (`read_paths`: a
folder's every entry, a Megatron dataset's ``.bin`` and ``.idx``); a file with several hard
links is refused too, since one of its names may lie outside. On a cluster (``--address``) the
files live on the nodes, so the check is on the path as written (normalized: no ``..``
escapes), and a link inside a data root is trusted.
"""

from __future__ import annotations

import os
import stat
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
    bases = [os.path.realpath(r) if resolve else os.path.normpath(r) for r in roots]
    # the path itself first: a folder outside the roots is never listed
    for path in [value, *(read_paths(value) if resolve else ())]:
        where = os.path.realpath(path) if resolve else os.path.normpath(path)
        inside = any(os.path.commonpath([where, base]) == base for base in bases)
        if not inside or (resolve and _hard_linked(where)):
            raise OutsideDataRoots(f"{field}: must be a file under a data root this service "
                                   f"allows (`moetune serve --data-root DIR`) or a config "
                                   f"shipped with moetune, every file it reads there too (no "
                                   f"link out of the roots), but got {value!r}.", field)


def read_paths(value: str) -> list[str]:
    """Every path that reading ``value`` may open beside ``value`` itself: each entry of a
    folder (at any depth, links included: a corpus folder reads them all), and a Megatron
    dataset's ``PREFIX.bin`` and ``PREFIX.idx`` (``value`` its prefix or either file; listed
    whether they exist or not, so a link's target is judged by its path alone and the answer
    is the same whether that target exists)."""
    from trainers.megatron import paths as megatron_paths  # torch: not for `moetune --help`

    path = Path(value)
    prefix = path.with_suffix("") if path.suffix in (".bin", ".idx") else path
    out = [str(p) for p in megatron_paths(prefix)]
    if path.is_dir():
        out += [str(p) for p in sorted(path.rglob("*"))]
    return out


def _hard_linked(path: str) -> bool:
    """Whether ``path`` is a file with another name somewhere (its link count above 1): one of
    them may lie outside the roots, and no path says which."""
    try:
        st = os.stat(path)
    except OSError:
        return False  # nothing there to read
    return stat.S_ISREG(st.st_mode) and st.st_nlink > 1


def _section(table: dict[str, Any], name: str) -> dict[str, Any]:
    got = table.get(name)
    return got if isinstance(got, dict) else {}


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True
