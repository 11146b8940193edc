"""`assay get`, `results`, `logs` and `describe`: an Evaluation's outcome read from the cluster.

What `kubectl get evaluation -o jsonpath=...` would dig out, printed for people: a table of
Evaluations (`listing`), lm-eval's results table rebuilt from `status` (`results_view`), the
runner pods' logs rank 0 first (`pod_logs`), and the conditions and Events in plain words
(`describe`, with `advice` on what to do). `cluster_api` is the one place these commands
reach the API server, reading the kubeconfig as kubectl does; `commands` wires them into
`assay`'s argument parser. Above the operator (its labels, condition names) and the runner
(its table renderer), below `assay.cli`.
"""
