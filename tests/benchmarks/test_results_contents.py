"""benchmarks/RESULTS.md, its archive and docs/tuning.md stay navigable: each file's contents
list names every section by the anchor GitHub gives it, and every link or quoted section title
that the README, the docs and the code use to cite a figure in RESULTS.md still finds it."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
ARCHIVE = ROOT / "benchmarks" / "RESULTS_ARCHIVE.md"
TUNING = ROOT / "docs" / "tuning.md"
CITING = ["README.md", "docs", "benchmarks", "trainers", "search_spaces", "tuner", "reports",
          "tests"]


def anchor(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    kept = (ch for ch in title.strip().lower()
            if ch in "-_ " or unicodedata.category(ch)[0] in "LMN")
    return "".join(kept).replace(" ", "-")


def headings(text: str) -> list[tuple[int, str, str]]:
    """``(level, title, anchor)`` per heading outside code fences; a repeated anchor gets
    GitHub's ``-1``, ``-2`` suffix."""
    out, seen, fenced = [], {}, False
    for line in text.splitlines():
        fenced ^= line.startswith("```")
        match = None if fenced else re.match(r"^(#{1,6}) (.+)$", line)
        if match:
            base = anchor(match.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.append((len(match.group(1)), match.group(2), base if not n else f"{base}-{n}"))
    return out


def contents(text: str) -> list[str]:
    """The anchors the list under ``**Contents**`` links, top-level entries only."""
    block = text.split("**Contents**\n\n", 1)[1].split("\n\n", 1)[0]
    return re.findall(r"^- \[.*\]\(#([^)]+)\)$", block, re.M)


@pytest.mark.parametrize(("path", "level"), [(RESULTS, 2), (ARCHIVE, 2), (TUNING, 3)],
                         ids=lambda p: getattr(p, "name", ""))
def test_contents_lists_every_section_in_order(path: Path, level: int) -> None:
    text = path.read_text()
    sections = [a for n, _, a in headings(text) if n == level]
    assert contents(text) == sections, (
        f"{path.name}: the contents list must link every {'#' * level} section in order "
        "(a benchmark that added a section adds its line too)")


def test_headlines_stay_the_first_section() -> None:
    assert [t for level, t, _ in headings(RESULTS.read_text()) if level == 2][0] == "Headlines"


def _citing_files() -> list[Path]:
    files: list[Path] = []
    for name in CITING:
        path = ROOT / name
        files += [path] if path.is_file() else [
            p for p in path.rglob("*") if p.suffix in {".md", ".py", ".toml"}]
    return [p for p in files if p != Path(__file__).resolve()]


def test_every_link_into_results_finds_its_section() -> None:
    anchors = {p.name: {a for _, _, a in headings(p.read_text())} for p in (RESULTS, ARCHIVE)}
    broken = []
    for path in _citing_files():
        for name, target in re.findall(r"(RESULTS(?:_ARCHIVE)?\.md)#([\w\-]+)", path.read_text()):
            if target not in anchors[name]:
                broken.append(f"{path.relative_to(ROOT)}: {name}#{target}")
    assert not broken, broken


def test_every_quoted_section_title_finds_its_section() -> None:
    """A citation ``RESULTS.md, "Title"`` (or ``RESULTS.md ("Title"``), even one wrapped over
    lines of a comment, names the start of a heading of RESULTS.md or its archive."""
    titles = [t for p in (RESULTS, ARCHIVE) for _, t, _ in headings(p.read_text())]
    cited = re.compile(r"RESULTS(?:_ARCHIVE)?\.md`?,? \(?\"([^\"]+)\"")
    stale = []
    for path in _citing_files():
        for quoted in cited.findall(path.read_text()):
            title = re.sub(r"\s*\n\s*(?:#\s*)?", " ", quoted)
            if not any(t.startswith(title) for t in titles):
                stale.append(f"{path.relative_to(ROOT)}: {title!r}")
    assert not stale, stale
