"""search_spaces: declarative search spaces (TOML) and the loader that validates them.

    >>> from search_spaces import load_space
    >>> space = load_space("deepseek_v3.toml")  # doctest: +SKIP
"""

from __future__ import annotations

from search_spaces.loader import Param, SearchSpace, SpaceError, load_space, space_from_dict

__all__ = ["Param", "SearchSpace", "SpaceError", "load_space", "space_from_dict"]
