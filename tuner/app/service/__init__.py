"""``moetune serve``: the study core behind an HTTP API and a web page, for a team.

Four floors (docs/architecture.md), each importing only from those below it:

- `access`: tokens and sessions, auth, the operator's caps, each user's quotas, private files,
  data roots.
- `running`: study drivers as detached Ray actors (a study keeps running when the HTTP process
  restarts), the scheduler that starts queued studies, cluster input checks, storage faults,
  the reaper that ends the local Ray with the service.
- this package's own modules: `context` (`Service`: the shared state, the study lookups and
  every action the API and the pages offer), the rules those actions apply, a module each
  (`config`, `submit_checks`, `limits`: caps and quotas, `ownership`: who may change a study
  and the run folders made here, `downloads`: reports and exports), and `views` (the cache
  that polled reads go through).
- `web`: the FastAPI application (JSON API with an OpenAPI description), the server-rendered
  pages (no build step, no CDN), the read-only Optuna dashboard, headers, limits, deadlines.

A study's record in the service (owner, state, times) and its state machine are
`tuner.app.requests.studies`, shared with the command line's actions.
"""
