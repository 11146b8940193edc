"""`assay data import`: public benchmark files converted into an ASSAY_DATASETS_DIR folder."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_arguments(data: argparse.ArgumentParser, *, parser_class: Any) -> None:
    """The `data` command's actions; `parser_class` is the CLI's parser, which can take its epilog
    from a function (the importer's sources, read only when the help is printed)."""
    data_sub = data.add_subparsers(dest="data_command", metavar="ACTION", parser_class=parser_class)
    imp = data_sub.add_parser(
        "import",
        help="Convert public benchmark files into an ASSAY_DATASETS_DIR folder",
        description="Convert public benchmark files into an ASSAY_DATASETS_DIR folder; then list the tasks it serves.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    imp.epilog_from = _import_sources
    imp.add_argument("--from", dest="src", required=True, type=Path, help="Folder with the raw benchmark files")
    imp.add_argument("--to", dest="dst", required=True, type=Path, help="ASSAY_DATASETS_DIR folder to write")
    imp.add_argument("--only", default=None, help="Comma-separated subset of the benchmarks")


def _import_sources() -> str:
    from assay.runner.data import importer

    return f"benchmarks (--only) and the files each reads under --from:\n{importer.sources_help()}"


def run_import(args: argparse.Namespace) -> int:
    from assay.runner.data import importer
    from assay.runner.tasks import offline_data
    from assay.runner.tasks.index import TaskManager

    only = [name.strip() for name in args.only.split(",") if name.strip()] if args.only else None
    written = importer.convert(args.src, args.dst, only)
    print(offline_data.import_report(written, args.dst, TaskManager()))
    print(f"imported {', '.join(written)} into {args.dst}; set ASSAY_DATASETS_DIR={args.dst}")
    return 0
