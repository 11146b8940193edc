"""Pure manifests and names: what the operator would create for a spec, as plain dicts.

`builders` (the runner Job, with its spec in its pod template, and its Service), `children`
(a run's objects in order, its NetworkPolicy), `runner_identity` (the namespace's runner
ServiceAccount, Role and RoleBinding), `containers` (the runner pod's containers and volumes), `names` (child names and label values within Kubernetes'
limits), `failure_policy` (the Job's podFailurePolicy), `runner_images` (the default
images), `metric_labels` (label values for Prometheus from user strings). Same input, same
output: no API call, no thread, no clock. The admin's policy (`admission`) fills defaults in.
"""
