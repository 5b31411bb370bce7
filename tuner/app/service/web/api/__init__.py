"""The JSON API under ``/api/v1``, one router per resource: `studies` (submit, read, follow,
cancel, resume, delete, report, export) and `users` (who a token belongs to); `deps` holds what
every route depends on (the service, the signed-in user)."""
