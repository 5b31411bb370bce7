"""What a study stores, and where.

`database` (URLs, engines, faults), `storage` (the Optuna study, its schema and stored spec),
`records` (the attribute names a study stores), `lease` (one driver per study), `control` (a
stop request).
"""
