"""The service's HTTP side: `main` (the FastAPI application put together), `api` (the JSON
API, a router per resource), `pages` (the server-rendered HTML, a router per resource, its
templates and files), `errors` (every error's JSON answer), `dashboard` and `dashboard_mount`
(Optuna's dashboard, read-only), `headers` (security headers on every response), `body_limit`
(request size), `deadline` (uvicorn's h11 with a deadline per request)."""
