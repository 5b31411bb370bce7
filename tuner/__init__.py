"""tuner: the moetune study core, its full-run modeling and exporter, and the application.

Sub-packages, one floor each (docs/architecture.md is the map):

- `tuner.modeling`: full-run modeling (cost model, scaling rules, hardware registry).
- `tuner.study`: the study core (spec, storage, trial records, ranking, samplers, the Ray Tune ⇄
  Optuna searcher, the runner).
- `tuner.export`: pick a trial and render it as launch configs.
- `tuner.app`: the ``moetune`` command line.

`tuner.testing` holds fake trainers for orchestration tests (``--trainer tuner.testing:...``).

    >>> from tuner.study import load_spec, run_study
    >>> spec = load_spec("search_spaces/quickstart.toml")  # doctest: +SKIP
    >>> run_study(spec, run_dir=Path("runs") / spec.name)  # doctest: +SKIP
"""
