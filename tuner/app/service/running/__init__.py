"""Running the service's studies: `driver` (each study's driver as a detached Ray actor),
`scheduler` (starts queued studies, notices dead drivers), `attached` (drivers this process
started), `cluster_checks` (a spec's input checks in a Ray task on a cluster), `faults` (a
storage that does not answer, and the 503 the API sends), `ray_reaper` (the local Ray ends
with the service, kill -9 included)."""
