"""The project's one rule check: an error naming the field, the rule and the value.

Every package validates its input with these (``trainers`` is the lowest floor, so every other
package may import them): `require` for a rule, `reject_unknown` for a table's keys. The caller
chooses the error class, a `FieldError` subclass (``SpecError``, ``SpaceError``, ...), so each
layer keeps its own error type while ``e.field`` says where, for a service to report without
reading the text; `relabel` says the same error of another name (a spec key's path, a
command-line flag).

    >>> require(1 > 0, "lr", "must be > 0", 1.0)
    >>> try:
    ...     require(0 > 1, "lr", "must be > 0", 0.0)
    ... except FieldError as e:
    ...     print(e.field, "|", e)
    lr | lr: must be > 0, but got 0.0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any


class _NoValue:
    """An error raised with a message of its own: no rule and value to say again."""

    def __reduce__(self) -> str:
        return "_NO_VALUE"  # unpickles as this module's one instance


_NO_VALUE: Any = _NoValue()


class FieldError(ValueError):
    """An input breaks a rule. ``field`` names the input (a spec key such as ``study.name``, a
    dataclass field, a command-line flag); the message says the rule and the value. ``rule``
    and ``value`` are kept when `require` raised it, so `relabel` can say it again."""

    def __init__(self, message: str, field: str = "", *, rule: str = "",
                 value: Any = _NO_VALUE) -> None:
        super().__init__(message)
        self.field = field
        self.rule = rule
        self.value = value

    def __reduce__(self) -> tuple[Any, ...]:  # across processes (Ray) with its field
        return (_rebuild, (type(self), str(self), self.field, self.rule, self.value))


def _rebuild(cls: type[FieldError], message: str, field: str, rule: str,
             value: Any) -> FieldError:
    return cls(message, field, rule=rule, value=value)


def field_error(field: str, rule: str, value: Any, *, error: type[FieldError] = FieldError,
                owner: str = "", shown: Callable[[Any], str] = repr) -> FieldError:
    """The error of ``field`` breaking ``rule`` with ``value``:
    ``"<field>: <rule>, but got <shown(value)>."``; with an ``owner`` (a dataclass checking its
    own fields) ``"<owner>.<field>: <rule>, but got <field>=<value>."``."""
    if owner:
        where, got = f"{owner}.{field}", f"{field}={shown(value)}"
    else:
        where, got = field, shown(value)
    return error(f"{where}: {rule}, but got {got}.", field, rule=rule, value=value)


def require(cond: bool, field: str, rule: str, value: Any, *,
            error: type[FieldError] = FieldError, owner: str = "") -> None:
    """Raise ``error`` (`field_error`'s message, ``.field`` = ``field``) unless ``cond``."""
    if not cond:
        raise field_error(field, rule, value, error=error, owner=owner)


def reject_unknown(table: Mapping[str, Any] | Iterable[str], valid: Iterable[str], field: str,
                   *, error: type[FieldError] = FieldError) -> None:
    """Raise ``error`` if ``table`` has a key not in ``valid``:
    ``"<field>: unknown key(s) [...]; valid keys are [...]."`` (``.field`` = ``field``)."""
    valid = sorted(valid)
    unknown = sorted(set(table) - set(valid))
    if unknown:
        raise error(f"{field}: unknown key(s) {unknown}; valid keys are {valid}.", field,
                    rule=f"unknown key(s) {unknown}; valid keys are {valid}", value=_NO_VALUE)


def relabel(e: FieldError, field: str, *, error: type[FieldError] = FieldError,
            shown: Callable[[Any], str] = repr) -> FieldError:
    """``e`` said of ``field`` instead of ``e.field`` (``gpus`` -> ``full_run.gpus`` or
    ``--gpus``), as an ``error``; ``shown`` writes the value (a flag: ``--gpus 0``)."""
    if e.rule and e.value is not _NO_VALUE:
        return field_error(field, e.rule, e.value, error=error, shown=shown)
    text = str(e)
    rest = text[len(e.field):] if e.field and text.startswith(e.field) else f": {text}"
    return error(field + rest, field, rule=e.rule, value=e.value)
