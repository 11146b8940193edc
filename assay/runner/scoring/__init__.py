"""Stage 3: scoring — filters, per-document metrics, aggregations and their stderr."""
