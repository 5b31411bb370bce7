"""Who may do what, and what may be reached: `tokens` (bearer tokens and browser sessions, stored
hashed), `auth` (who is asking; same-origin and CSRF checks), `caps` (the operator's limits per
submit and resume), `quotas` (each user's studies, trainings at once and disk), `private` (the
root 0700, files 0600, reserved names), `data_roots` (which files a spec may name)."""
