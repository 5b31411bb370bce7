"""The service's HTTP side: `api` (the FastAPI application), `pages` (the server-rendered HTML),
`dashboard` (the read-only Optuna dashboard), `headers` (security headers on every response),
`body_limit` (request size), `deadline` (uvicorn's h11 with a deadline per request)."""
