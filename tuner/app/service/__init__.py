"""``moetune serve``: the study core behind an HTTP API and a web page, for a team.

- `studies`: the service's record of each study (owner, state, times) in the study storage,
  its state machine (`TRANSITIONS`), and the views the API and the page show (progress,
  trials, front).
- `driver`: study drivers as detached Ray actors, so a study keeps running when the HTTP process
  restarts; the service finds them again by name.
- `scheduler`: starts queued studies when a slot frees, notices drivers that died.
- `tokens`: bearer tokens and browser sessions, stored hashed in the study database.
- `auth`: who is asking (bearer token, or a session cookie checked against the database), and
  whether a change comes from our own pages (CSRF token, same origin).
- `private`: the root 0700 and every file the service creates 0600; the CSRF key file.
- `faults`: what a storage that does not answer looks like, and the 503 the API sends.
- `data_roots`: which files a submitted spec may name (`serve --data-root`).
- `headers`: frame, type and content-security headers on every response.
- `deadline`: uvicorn's h11 protocol with a deadline for each request's headers and body.
- `api`: the FastAPI application (JSON API with an OpenAPI description, the pages, the
  read-only Optuna dashboard).
- `pages`: the server-rendered HTML (no build step, no CDN).
"""
