"""A spec's TOML, read into typed sections: the one error type (`SpecError`), the one TOML
reader of a spec file and a submitted spec alike (`read_toml`), a table into a section
dataclass with its keys' types checked and unknown keys refused (`section`), and a path read from
the spec's folder (`absolute`).

    >>> section(BudgetSection, {"tokens_per_trial": 1000, "eval_every_tokens": 250}, "budget")
    ... # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from trainers.config.validation import FieldError, reject_unknown, require

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


class SpecError(FieldError):
    """A study spec breaks a rule; ``field`` names the key (``study.name``), the message the
    rule and the value."""


MAX_KEY_PARTS = 64  # dotted parts of one TOML key (`read_toml`)


def read_toml(text: str, field: str, *, origin: str | None = None,
              max_bytes: int | None = None) -> dict[str, Any]:
    """``text`` parsed as TOML, for a spec file and a submitted spec alike; ``field`` is what
    an error names, ``origin`` what its message calls the text (default: the field).

    Raises:
        SpecError: over ``max_bytes``, not UTF-8, a key of too many parts, or not TOML.
    """
    origin = origin or field
    try:
        size = len(text.encode())
    except UnicodeEncodeError:  # a lone surrogate, sent as a JSON escape
        raise SpecError(f"{origin}: must be UTF-8 text, but holds a character that is not "
                        "(a lone surrogate).", field) from None
    if max_bytes is not None and size > max_bytes:
        raise SpecError(f"{origin}: must be at most {max_bytes} bytes, but got {size}.", field)
    for number, line in enumerate(text.splitlines(), 1):
        # tomllib's time grows with the square of a dotted key's parts (a 26 KB key: 3 s of
        # CPU); no spec needs more than a few, so a long one is refused before parsing
        head = line.split("=", 1)[0]
        if head.count(".") >= MAX_KEY_PARTS:
            raise SpecError(f"{origin}: a key must have fewer than {MAX_KEY_PARTS} dotted "
                            f"parts, but line {number} has {head.count('.') + 1}.", field)
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise SpecError(f"{origin}: not valid TOML (arrays or tables nested too deep for the "
                        "parser).", field) from None
    except ValueError as e:  # TOMLDecodeError; an int of > 4300 digits
        raise SpecError(f"{origin}: not valid TOML ({first_line(e)}).", field) from None


def first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:200]


Section = TypeVar("Section", bound="DataclassInstance")


def section(cls: type[Section], table: Mapping[str, Any], where: str) -> Section:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    reject_unknown(table, tuple(fields), where, error=SpecError)
    kinds: dict[str, type | tuple[type, ...]] = {"str": str, "int": int, "float": float,
                                                 "int | str": (int, str)}
    for key, value in table.items():
        want = kinds[str(fields[key].type)]
        ok = isinstance(value, want) and not isinstance(value, bool)
        if want is float:  # TOML writes 3 for 3.0
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            ok = ok and math.isfinite(value)
        require(ok, f"{where}.{key}", f"must be {kind(want)}", value, error=SpecError)
    try:
        return cls(**table)
    except TypeError as e:  # a required key missing
        missing = [n for n, f in fields.items()
                   if f.default is dataclasses.MISSING and n not in table]
        key = f"{where}.{missing[0] if missing else '?'}"
        raise SpecError(f"{key}: is required ({e}).", key) from None


def kind(t: type | tuple[type, ...]) -> str:
    if isinstance(t, tuple):
        return " or ".join(kind(x) for x in t)
    return {int: "an integer", float: "a finite number", str: "a string"}.get(t, t.__name__)


def absolute(path: str, base_dir: Path | None) -> str:
    """``path`` read from the spec's folder (the current one for a table with no file)."""
    p = Path(path).expanduser()
    return str(p if p.is_absolute() else ((base_dir or Path.cwd()) / p).resolve())
