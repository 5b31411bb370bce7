"""The application's one error type for bad input."""

from __future__ import annotations


class UsageError(ValueError):
    """Bad command-line input: reported on stderr, exit status 2, nothing written."""
