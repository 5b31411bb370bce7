"""Why a trial did not count, in one line, keyed so that trials failing the same way group.

A failed trial's reason may be the tail of a Python traceback ("Traceback (most recent call
last):", the frames, then the exception line); what a reader needs is the exception line, the
same line `moetune status` shows. Other reasons are one line already.
"""

from __future__ import annotations

import re

NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[+-]?\d+)?")
# "ValueError: ...", "torch.OutOfMemoryError: ...", "KeyboardInterrupt": unindented, unlike the
# traceback's frame lines, which Python indents.
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?::\s|:?$)")


def one_line(reason: str) -> str:
    """The line of `reason` that says what went wrong: a traceback's exception line, else the
    last non-blank line (what `moetune status` shows)."""
    lines = [x.rstrip() for x in reason.splitlines() if x.strip()]
    if not lines:
        return ""
    if len(lines) > 1:
        for line in reversed(lines):
            if EXCEPTION_LINE.match(line) and not line.startswith("Traceback"):
                return line.strip()
    return lines[-1].strip()


# Reasons the tuner writes itself (tuner/outcome.py) join several findings with "; ", e.g.
# "diverged at step 12; constraint max_vio: 2.1 violates <= 2".
_OUTCOME_PARTS = ("constraint ", "diverged ", "non-finite ")


def reason_kind(reason: str) -> tuple[str, str]:
    """Split a reason into the kind it shares with others and this trial's detail (one line).

    "constraint max_vio: 2.1 violates <= 2" → ("constraint max_vio", "2.1 violates <= 2");
    "pruned by ASHA at 77824 tokens" → ("pruned by ASHA at N tokens", "77824");
    "Traceback (most recent call last):\\n  File ...\\nValueError: bad lr" → ("ValueError",
    "bad lr"); a reason of several findings keys on all of them:
    "diverged at step 12; constraint max_vio: 2.1 violates <= 2" →
    ("diverged at step N + constraint max_vio", "12; 2.1 violates <= 2").
    """
    line = one_line(reason)
    parts = line.split("; ")
    if len(parts) > 1 and all(p.startswith(_OUTCOME_PARTS) for p in parts):
        keyed = [_kind(p) for p in parts]
        return (" + ".join(k for k, _ in keyed),
                "; ".join(d for _, d in keyed if d))
    return _kind(line)


def _kind(line: str) -> tuple[str, str]:
    if ":" in line:
        kind, detail = line.split(":", 1)
        return kind.strip(), detail.strip()
    numbers = NUMBER.findall(line)
    return NUMBER.sub("N", line), ", ".join(numbers)
