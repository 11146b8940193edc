"""What a run checks before its model loads: the spec and each task's files (`offline_check`),
the model's and datasets' locations (`preflight`, with `hub_reach` for the hub)."""
