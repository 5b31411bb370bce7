"""Trials on Ray: what runs one trial and what feeds trials to Ray Tune.

`training` (the one training call: `Training`, `run_training`), `trainable` (the trial function
in a Ray worker), `searcher` (Ray Tune ⇄ Optuna: the only module that imports both),
`samplers`, `schedulers`, `cluster` (the Ray connection), `timing` (systems signatures timed
alone on the cores), `cores` (the machine's core lock), `progress` (bars and log lines).
"""
