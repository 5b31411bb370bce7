"""Why a trial is not a plain success, as typed reasons: a kind, what it concerns, the detail.

The study stores each trial's reasons twice (see `tuner.study.store.records`): as ``[kind, subject,
detail]`` triples, which reports group on, and as one line of text for people. Studies written
before the triples existed (schema 1) carry only the text; `parse_reason_text` reads it back.

    >>> r = Reason(kind="constraint", subject="max_vio", detail="2.1 violates <= 2")
    >>> r.text(), r.group()
    ('constraint max_vio: 2.1 violates <= 2', ('constraint max_vio', '2.1 violates <= 2'))
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

KINDS = ("diverged", "non_finite", "constraint", "out_of_memory", "timeout", "pruned",
         "interrupted",
         "exception", "invalid_recipe", "sampler_failed", "driver_failed", "worker_died",
         "other")

NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[+-]?\d+)?")
# "ValueError: ...", "torch.OutOfMemoryError: ...": unindented, unlike a traceback's frames.
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?::\s|:?$)")

_FIXED_TEXT = {
    "non_finite": "non-finite objective value",
    "interrupted": "interrupted",
    "worker_died": "the trial's worker process died or raised outside the trainer (see the Ray "
                   "trial folder's error.txt)",
}
_PREFIX = {
    "out_of_memory": "out of memory: ",
    "timeout": "time limit: ",
    "invalid_recipe": "invalid recipe: ",
    "sampler_failed": "the sampler failed: ",
    "driver_failed": "the driver could not score the trial: ",
}


@dataclass(frozen=True)
class Reason:
    """One finding about a trial.

    Fields:
        kind: one of `KINDS`.
        subject: what it concerns: the constraint key (``constraint``), the exception type
            (``exception``); empty otherwise.
        detail: this trial's own part (a step, a value, a message, a traceback's tail).
    """

    kind: str
    subject: str = ""
    detail: str = ""

    def __post_init__(self) -> None:
        assert self.kind in KINDS, f"unknown reason kind {self.kind!r}"

    def text(self) -> str:
        """The reason as one readable phrase (a traceback's tail for ``exception``)."""
        k, d = self.kind, self.detail
        if k == "constraint":
            return f"constraint {self.subject}: {d}"
        if k == "diverged":
            return f"diverged at step {d}"
        if k == "pruned":
            return f"pruned by ASHA at {d} tokens"
        if k in _FIXED_TEXT:
            return _FIXED_TEXT[k]
        return _PREFIX.get(k, "") + d

    def group(self) -> tuple[str, str]:
        """(key shared by trials failing the same way, this trial's detail in one line)."""
        k = self.kind
        if k == "constraint":
            return f"constraint {self.subject}", self.detail
        if k == "diverged":
            return "diverged at step N", self.detail
        if k == "pruned":
            return "pruned by ASHA at N tokens", self.detail
        if k == "exception":
            line = one_line(self.detail)
            kind, _, rest = line.partition(":")
            return (self.subject or kind.strip()), rest.strip()
        if k in _FIXED_TEXT:
            return _FIXED_TEXT[k], ""
        line = one_line(self.text())
        if ":" in line:
            head, tail = line.split(":", 1)
            return head.strip(), tail.strip()
        return NUMBER.sub("N", line), ", ".join(NUMBER.findall(line))

    def to_list(self) -> list[str]:
        return [self.kind, self.subject, self.detail]


def join_text(reasons: Iterable[Reason]) -> str:
    """Every reason's text, "; "-joined (what `moetune status` and the REASON attribute show)."""
    return "; ".join(r.text() for r in reasons)


def group_of(reasons: Sequence[Reason]) -> tuple[str, str]:
    """(group key, detail) of a trial: several findings key on all of them, so trials failing
    the same ways group together whatever their own numbers."""
    keyed = [r.group() for r in reasons]
    if not keyed:
        return "", ""
    return " + ".join(k for k, _ in keyed), "; ".join(d for _, d in keyed if d)


def from_lists(items: Iterable[Sequence[str]]) -> tuple[Reason, ...]:
    """Reasons from their stored ``[kind, subject, detail]`` triples."""
    return tuple(Reason(kind=str(k), subject=str(s), detail=str(d)) for k, s, d in items)


def one_line(text: str) -> str:
    """The line of ``text`` that says what went wrong: a traceback's exception line, else the
    last non-blank line."""
    lines = [x.rstrip() for x in text.splitlines() if x.strip()]
    if not lines:
        return ""
    if len(lines) > 1:
        for line in reversed(lines):
            if EXCEPTION_LINE.match(line) and not line.startswith("Traceback"):
                return line.strip()
    return lines[-1].strip()


def exception_reason(traceback_tail: str) -> Reason:
    """An exception's reason from the last lines of its traceback."""
    line = one_line(traceback_tail)
    subject = line.partition(":")[0].strip() if EXCEPTION_LINE.match(line) else ""
    return Reason(kind="exception", subject=subject, detail=traceback_tail)


# -- schema 1: reasons stored as text only -----------------------------------------------------

_TEXT_PATTERNS = (
    (re.compile(r"^constraint (\S+): (.*)$"), "constraint"),
    (re.compile(r"^diverged at step (\S+)$"), "diverged"),
    (re.compile(r"^pruned by ASHA at (\d+) tokens$"), "pruned"),
)


def parse_reason_text(text: str) -> tuple[Reason, ...]:
    """Typed reasons from a schema-1 REASON text.

    Several findings joined by "; " are split only when every part is a finding the tuner
    writes itself; an exception's own "; " stays in its message.
    """
    if not text.strip():
        return ()
    line = one_line(text)
    parts = line.split("; ")
    if len(parts) > 1 and all(_parse_part(p) is not None for p in parts):
        return tuple(r for p in parts if (r := _parse_part(p)) is not None)
    found = _parse_part(line)
    if found is not None:
        return (found,)
    if len(text.strip().splitlines()) > 1 or EXCEPTION_LINE.match(line) and ":" in line:
        return (exception_reason(text),)
    for kind, fixed in _FIXED_TEXT.items():
        if line == fixed:
            return (Reason(kind=kind),)
    for kind, prefix in _PREFIX.items():
        if line.startswith(prefix):
            return (Reason(kind=kind, detail=line[len(prefix):]),)
    return (Reason(kind="other", detail=line),)


def _parse_part(part: str) -> Reason | None:
    if part == _FIXED_TEXT["non_finite"]:
        return Reason(kind="non_finite")
    for pattern, kind in _TEXT_PATTERNS:
        m = pattern.match(part)
        if m:
            if kind == "constraint":
                return Reason(kind=kind, subject=m.group(1), detail=m.group(2))
            return Reason(kind=kind, detail=m.group(1))
    return None
