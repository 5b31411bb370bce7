"""What both front ends (the command line and the service) share, below either of them.

`actions` (export, cancel, delete, resume as typed requests, one function running each),
`submit` (the submit request and the one way its spec is read), `export_options` (the export's
options checked and made into the full run), `errors` (the one error type for bad input),
`studies` (a study's state in the service: its record, state machine and views) with
`ladder_rungs` and `law_grid` (a ladder's rungs and a law's budgets as one study).
"""
