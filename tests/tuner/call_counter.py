"""Count calls of named functions in this process, by the function's own file and name (so an
import by name, ``from m import f``, is counted as well as ``m.f``): the preflight tests and
``benchmarks/count_checks.py`` count spec parses, input checks and storage opens with it."""

from __future__ import annotations

import collections
import contextlib
import sys
import threading
from collections.abc import Iterator

# (file name, function name) -> what a call of it is
CHECKS = {
    ("spec.py", "parse_spec"): "spec parses",
    ("spec.py", "check_inputs"): "input checks",
    ("database.py", "_rdb_storage"): "storage opens",  # every Optuna RDB storage is made here
    ("resume.py", "check_resume_spec"): "resume-rule checks",
    ("lease.py", "check_free"): "lease calls",
    ("lease.py", "acquire"): "lease calls",
    ("samplers.py", "make_sampler"): "samplers built",
    ("storage.py", "load_study"): "study loads",
}


@contextlib.contextmanager
def counting(watch: dict[tuple[str, str], str] = CHECKS) -> Iterator[collections.Counter]:
    """Within the block, count the calls of ``watch``'s functions in every thread of this
    process (a profile hook: slow, for counting only)."""
    counts: collections.Counter = collections.Counter()

    def hook(frame, event, arg):  # noqa: ANN001, ANN202 - sys.setprofile's signature
        if event == "call":
            code = frame.f_code
            what = watch.get((code.co_filename.rsplit("/", 1)[-1], code.co_name))
            if what:
                counts[what] += 1

    sys.setprofile(hook)
    threading.setprofile(hook)
    try:
        yield counts
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
