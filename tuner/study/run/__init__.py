"""Running one study.

`runner` (`run_study`), `searcher` (Ray Tune ⇄ Optuna: the only module that imports both),
`trainable` (the trial function in a Ray worker), `samplers`, `timing` (systems signatures timed
alone on the cores), `cores` (the machine's core lock), `progress` (bars and log lines).
"""
