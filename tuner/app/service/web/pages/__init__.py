"""The service's web pages: server-rendered HTML (Jinja templates in ``templates/``, autoescaped)
with their script and style in ``static/``, served at ``/assets``: no build step and no CDN, so
they work offline, and the pages' Content-Security-Policy allows no inline script. One router
per resource: `studies` (the list, a study's page and its buttons and export form), `submit`,
`session` (sign in and out); `render` holds the layout and the signed-in check. The study list
polls the JSON API; a study's page follows its Server-Sent Events stream, so progress, trials,
the Pareto front and the learning curves update while the study runs. Every form carries the
session's CSRF token."""
