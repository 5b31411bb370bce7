"""The spec and its sections.

`spec` (`StudySpec`, `parse_spec` pure, `check_inputs` the file checks), `start_spec`
(``[start]``), `ladder_spec` (``[ladder]``), `law_spec` (``[law]``), `proxy` (the model args a
spec resolves to), `metrics` (the metric table: what a spec may name as an objective or a
constraint, measured or modeled), `urls` (a storage URL's schemes and masked form).
"""
