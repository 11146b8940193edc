"""`python -m assay.runner`: the runner Job's entry point (see `assay.runner.job`)."""

from assay.runner.job import main

raise SystemExit(main())
