"""A study's results.

`trial_record` (the typed record), `outcome` (a trial's end as an Optuna outcome), `reasons`
(why a trial did not count), `ranking` (Pareto rank, crowding, knee), `noise` (run-to-run noise
and ties), `diagnostics`.
"""
