"""Workflows on top of whole studies.

`ladder` and `law` (several studies in one storage, run stage by stage) with `law_fit` and
`law_progress`, `rerun` (one trial again), `validate` (a recipe on a longer budget).
"""
