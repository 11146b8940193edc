"""Stage 0: data — local copies of benchmark datasets and the importer that builds them."""
