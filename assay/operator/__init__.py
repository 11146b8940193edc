"""The control plane: kopf handlers, child-resource builders, status and metrics."""
