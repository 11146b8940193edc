"""`assay check RUN`: its flags and exit codes; the checks are `assay.runner.results.sentinel_check`'s.

Kept apart from the runner so that `assay --help` and `assay compare` build their parser
without importing the engine.

Exit codes: 0 every check passed, 1 a check failed, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import textwrap
from typing import Any

from assay.errors import UsageError
from assay.run_options import SentinelSettings

DESCRIPTION = "Check a run's scores for what a broken engine or endpoint produces (the run's sentinels)."
EPILOG = textwrap.dedent("""
    RUN is an output folder (or results JSON) of `assay run` or `lm_eval`; with --log_samples
    the per-document checks run too (below chance, choices scored alike, empty, unparsed or
    truncated answers), without it only the metric ranges. See docs/sentinels.md.

    exit codes: 0 every check passed, 1 a check failed, 2 bad input

    examples:
      assay check out/run
      assay check out/run --sentinels below_chance_alpha=0.01 --format json
""")


def add_parser(sub: Any) -> None:
    """`assay check` under the command line's subcommands."""
    parser = sub.add_parser(
        "check",
        help="Check a run's scores for what a broken engine produces (its sentinels)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run", metavar="RUN", help="An output folder or results JSON")
    parser.add_argument(
        "--sentinels",
        default="on",
        metavar="<name=value,...>",
        help="Thresholds over the defaults, e.g. below_chance_alpha=0.001,degenerate_fraction=0.5",
    )
    parser.add_argument("--format", choices=("table", "json"), default="table", help="Output format (default table)")


def run(args: argparse.Namespace) -> int:
    settings = SentinelSettings.parse(args.sentinels)
    if not settings.enabled:
        raise UsageError("--sentinels off leaves nothing to check; give thresholds or leave the flag out.")
    from assay.runner.results import sentinel_check

    found = sentinel_check.check(args.run, settings)
    print(json.dumps(found, indent=2) if args.format == "json" else sentinel_check.render(found))
    return 0 if found["trusted"] else 1
