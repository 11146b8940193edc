"""Stage 4: results — the results dict, files, table, loggers and the status sink."""
