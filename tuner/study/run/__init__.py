"""Running one study, start to end.

`preflight` (everything checked before the first trial: `prepare` → `Plan`), `runner`
(`run`, `run_study`), `resume` (which spec changes a resume may make; which trials count),
`start` (baselines and enqueued points, queued once), `warm_start` (another study's trials for
the sampler), `noise_retrain` (the top trials re-trained with other seeds after the trials).
"""
