"""May this spec run? The cluster admin's policy and the checks a spec passes before any child exists.

`policy` (what a spec may ask for at all, endpoints and secrets in the spec included) and
`placement_policy` (priority, tolerations, Kueue, the runner pod's defaults), `validation`
(task and model names against the engine's library), `task_sources` (a tenant's task
ConfigMaps), `secret_consent` (the Secrets a spec names). Pure: what they read (ConfigMaps,
Secrets' metadata) comes through getters the caller passes, so nothing here calls the API.
"""
