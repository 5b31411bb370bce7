"""Workflows on top of one study.

`start` (baselines and enqueued points), `warm_start` (another study's trials for the sampler),
`ladder` and `law` (several studies in one storage) with `law_fit`, `rerun` (one trial again),
`validate` (a recipe on a longer budget).
"""
