"""The spec and its sections.

`spec` (`StudySpec`, `parse_spec` pure and thin, `check_inputs` the file checks, `load_spec`),
`table` (the error type, the TOML reader, a table into a section), `sections` (``[study]``,
``[budget]``, ``[pruning]``, ``[resources]``), `model_spec` (``[model]``, ``[full_run]``),
`data_spec` (``[data]``), `start_spec` (``[start]``), `ladder_spec` (``[ladder]``), `law_spec`
(``[law]`` and what a law needs of the rest of the spec), `sampler_registry` (the samplers a
spec may name, and how each is built), `proxy` (the model args a spec resolves to), `metrics`
(the metric table: what a spec may name as an objective or a constraint, measured or modeled),
`urls` (a storage URL's schemes and masked form).
"""
