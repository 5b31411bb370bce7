"""Markdown that user text cannot break: the escaping every ``.md`` report uses."""

from __future__ import annotations

import re
from collections.abc import Sequence


def md_text(text: str) -> str:
    """``text`` made inert in Markdown: no raw HTML (a trial's error message or a categorical
    choice is user text, and Markdown renderers pass raw HTML through): ``<`` is escaped where a
    tag could open (before a letter, ``/``, ``!`` or ``?``) and ``&`` where an entity could
    (before a letter or ``#``), so "<= 2" and "5.0 > 4.0" stay as written; table pipes
    escaped, line breaks flattened."""
    flat = text.replace("\r", " ").replace("\n", " ")
    flat = re.sub(r"&(?=[A-Za-z#])", "&amp;", flat)  # only where an entity could start
    return re.sub(r"<(?=[A-Za-z/!?])", "&lt;", flat).replace("|", "\\|")  # or a tag


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table, every cell made inert (`md_text`)."""
    out = ["| " + " | ".join(md_text(h) for h in header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(md_text(c) for c in r) + " |" for r in rows]
    return out
