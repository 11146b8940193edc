"""The data plane: the evaluation engine and the runner Job entry point."""
