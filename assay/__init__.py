"""Assay: lm-evaluation-harness compatible evaluation, distributed and Kubernetes-native."""

__version__ = "0.1.0"
