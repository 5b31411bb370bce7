"""A database URL as a spec names it (``study.storage``, ``[start] warm_from``, ``--storage``):
the schemes a study may live in, and the URL's masked form. Opening a URL is
`tuner.study.store.database`'s; these two sit here because a spec checks them while it is
parsed, before any storage exists."""

from __future__ import annotations

import re

import sqlalchemy

# The URL schemes a study may live in (the spec's ``study.storage`` and ``--storage``).
URL_PREFIXES = ("sqlite:///", "postgresql", "mysql")


def shown(url: str) -> str:
    """``url`` with its password masked (``***``): what messages, files and stored attributes
    get. A URL SQLAlchemy cannot parse is masked by pattern, so it cannot leak either."""
    try:
        return sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)
    except (sqlalchemy.exc.ArgumentError, ValueError):
        return re.sub(r"(://[^/:@]*:)[^@/]*@", r"\1***@", url)
