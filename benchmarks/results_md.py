"""benchmarks/RESULTS.md, one section at a time: each benchmark rewrites only its own section."""

from __future__ import annotations

import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def write_section(heading: str, body: str, path: Path = RESULTS) -> None:
    """Replace the section under ``heading`` (a ``## `` line, up to the next one) with ``body``,
    or append it when the file has none."""
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    section = f"{heading}\n\n{body}\n"
    pattern = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text).rstrip() + "\n"
    else:
        text = text.rstrip() + "\n\n" + section
    path.write_text(text)


def publish(heading: str, lines: list[str]) -> None:
    """Write ``lines`` as the section under ``heading`` (`write_section`) and print them."""
    text = "\n".join(lines)
    write_section(heading, text)
    print(text)
