"""The one rule check of `trainers`: an error naming the field, the rule and the value."""

from __future__ import annotations

from typing import Any


def require(cond: bool, owner: str, field: str, rule: str, value: Any) -> None:
    """Raise ``ValueError("<owner>.<field>: <rule>, but got <field>=<value>.")`` unless ``cond``.

    >>> require(1 > 0, "Recipe", "lr", "must be > 0", 1.0)
    """
    if not cond:
        raise ValueError(f"{owner}.{field}: {rule}, but got {field}={value!r}.")
