"""`assay compare BASELINE CANDIDATE` and `assay compare --plan BASELINE`: flags and exit codes.

Exit codes: 0 no regression, 1 a regression, 2 bad input (one sentence on stderr), 3 an
inconclusive comparison under `--strict`.
"""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from assay.compare import verdicts
from assay.errors import UsageError, UserError

if TYPE_CHECKING:
    from assay.compare.comparison import Comparison

# The statistics (numpy) are imported when the command runs, not when `assay --help` builds its parser.
FORMATS = ("table", "json", "markdown")

DESCRIPTION = "Is the candidate run worse than the baseline, or is it noise? Paired tests on lm-eval-format output."
EPILOG = textwrap.dedent("""
    BASELINE and CANDIDATE are output folders (or results JSONs) of `assay run` or `lm_eval`
    run with --log_samples. Documents pair on doc_hash. Tests: exact McNemar (0/1 metrics),
    paired t (other means), paired bootstrap (perplexity, BLEU and other corpus metrics),
    clustered z (a task whose YAML names metadata.cluster_key), stratified z (groups, as a
    whole); the overall verdict is Holm-corrected over all rows. See docs/compare.md.

    exit codes: 0 no regression, 1 a regression, 2 bad input, 3 inconclusive with --strict

    examples:
      assay compare out/baseline out/candidate
      assay compare base.json cand.json --max-drop 0.01 --max-drop 'mmlu*:acc=0.02' --format json
      assay compare out/baseline out/candidate --plot forest.svg
      assay compare --plan out/baseline --mde 0.02
""")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUN", help="BASELINE CANDIDATE (or, with --plan, BASELINE)")
    parser.add_argument(
        "--plan", action="store_true", help="Size a comparison from the baseline alone: its MDE and documents needed"
    )
    parser.add_argument(
        "--alpha", type=_fraction, default=0.05, help="Significance level; intervals are 1−alpha (default 0.05)"
    )
    parser.add_argument(
        "--max-drop",
        action="append",
        default=[],
        type=verdicts.parse_max_drop,
        metavar="[TASK[:METRIC]=]VALUE",
        help="Tolerated drop in the metric's units (default 0); repeatable, TASK may be a glob",
    )
    parser.add_argument(
        "--equivalence-margin",
        type=_non_negative,
        default=None,
        metavar="M",
        help="Call a metric equivalent when its 1−2·alpha interval lies inside ±M (TOST)",
    )
    parser.add_argument(
        "--iterations", type=_positive_int, default=1000, help="Bootstrap iterations for corpus metrics (default 1000)"
    )
    parser.add_argument("--seed", type=int, default=1234, help="Bootstrap seed (default 1234)")
    parser.add_argument("--format", choices=FORMATS, default="table", help="Output format (default table)")
    parser.add_argument("--strict", action="store_true", help="Exit 3 when the verdict is inconclusive")
    parser.add_argument(
        "--plot",
        type=_plot_file,
        default=None,
        metavar="FILE.svg|FILE.png",
        help="Also draw a forest plot of the deltas and their intervals (PNG needs matplotlib)",
    )
    parser.add_argument(
        "--mde", type=_non_negative, default=None, help="--plan: the effect to detect; prints the documents needed"
    )
    parser.add_argument(
        "--correlation",
        type=_correlation,
        default=0.5,
        help="--plan: assumed correlation of baseline and candidate scores per document (default 0.5)",
    )


def run(args: argparse.Namespace) -> int:
    from assay.compare import comparison, outputs, render

    if args.plan:
        if len(args.runs) != 1:
            raise UsageError("--plan takes one run, the baseline.")
        return _plan(args)
    if len(args.runs) != 2:
        raise UsageError("assay compare takes two runs, BASELINE and CANDIDATE (or --plan BASELINE).")
    settings = comparison.Settings(
        alpha=args.alpha,
        iterations=args.iterations,
        seed=args.seed,
        tolerances=tuple(args.max_drop),
        margin=args.equivalence_margin,
    )
    try:
        result = comparison.compare_runs(
            outputs.read_run(args.runs[0], label="baseline"),
            outputs.read_run(args.runs[1], label="candidate"),
            settings,
        )
    except UserError:
        raise
    except Exception as error:
        from assay.compare import failures

        raise UsageError(failures.sentence(error, runs="The runs")) from None
    print(render.render(result, args.format))
    if args.plot is not None:
        _plot(result, args.plot)
    codes = verdicts.STRICT_EXIT_CODES if args.strict else verdicts.EXIT_CODES
    return codes[result.verdict]


def _plot(result: Comparison, path: Path) -> None:
    from assay.compare import forest

    try:
        forest.write(result, path)
    except OSError as error:
        raise UsageError(f"--plot {path}: cannot write it ({error.strerror or error}).") from None


def _plan(args: argparse.Namespace) -> int:
    from assay.compare import outputs, planning

    run_output = outputs.read_run(args.runs[0], label="baseline")
    try:
        rows = planning.plan(run_output, alpha=args.alpha, correlation=args.correlation, target=args.mde)
    except (KeyError, TypeError, ValueError, IndexError) as error:
        raise UsageError(
            f"The run could not be read: a results or samples file has an unexpected shape ({error!r})."
        ) from None
    fmt = "json" if args.format == "json" else "table"
    print(
        planning.render_plan(
            rows,
            label=str(run_output.results_path),
            alpha=args.alpha,
            correlation=args.correlation,
            target=args.mde,
            fmt=fmt,
        )
    )
    return 0


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def _fraction(text: str) -> float:
    value = _number(text)
    if not 0 < value < 0.5:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 0.5")
    return value


def _non_negative(text: str) -> float:
    value = _number(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def _correlation(text: str) -> float:
    value = _number(text)
    if not -1 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not in [-1, 1)")
    return value


def _plot_file(text: str) -> Path:
    if Path(text).suffix.lower() not in (".svg", ".png"):
        raise argparse.ArgumentTypeError(f"{text!r} is neither a .svg nor a .png file")
    return Path(text)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is less than 1")
    return value
