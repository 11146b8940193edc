"""The controller runtime: what runs over time, on threads and queues, and carries decisions out.

`decisions` (the work queue of run decisions, retried), `converge` (a plan carried out with
API calls; lost Jobs made again), `observe` (a run's Job and pods mirrored into status),
`watched` (the newest bodies the watches showed), `periodic` (sweep threads), `events` and
`event_correlation` (the Event poster thread), `metrics`, `metrics_server`, `metrics_auth`,
`metrics_tls` and `controller_metrics` (Prometheus), `leader` (Lease election), `state` (what the handlers
share, typed, kept in kopf's memo). Above the pure layers (`decide`, `build`, `admission`)
and the API client (`kube`), below the kopf handlers.
"""
