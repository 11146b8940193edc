"""`assay apply -f eval.yaml --local`: run an Evaluation manifest on this machine.

The same manifest that goes to a cluster runs here with the same parsing and the same
checks (assay.spec, assay.operator.admission.validation); instead of a Job, the engine runs
in-process, or under torchrun when `resources` ask for several devices (nodes ×
gpusPerNode processes on this one machine). The outcome is printed as the Evaluation's
`status` would read in the cluster, as YAML on stdout; lm-eval's table and the folder the
results were written to go to stderr, for the reader.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml

from assay import spec as spec_module
from assay.errors import UsageError, UserError
from assay.operator.admission import validation
from assay.operator.decide import conditions
from assay.runner import api as engine
from assay.spec import manifest_file

DEFAULT_OUTPUT_ROOT = "assay-output"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="assay apply", description="Run Evaluation manifests.")
    parser.add_argument(
        "-f", "--filename", required=True, help="Manifest file (YAML, several documents allowed; - for stdin)."
    )
    parser.add_argument("--local", action="store_true", help="Run here instead of in a cluster (required).")
    parser.add_argument(
        "--output-dir",
        "-o",
        default=DEFAULT_OUTPUT_ROOT,
        help="Results go to OUTPUT_DIR/<name> unless the spec's output.path says otherwise.",
    )
    return parser


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    try:
        args = build_parser().parse_args(list(argv))
    except SystemExit as exit:
        if exit.code in (0, None):
            raise
        raise UsageError("Invalid arguments of `assay apply`; see `assay apply --help`.") from None
    if not args.local:
        raise UsageError("`assay apply` runs manifests here only with --local; for a cluster use `kubectl apply -f`.")
    return args


def load_manifests(path: str, *, stdin: TextIO | None = None) -> list[tuple[Mapping[str, Any], spec_module.Evaluation]]:
    """Every Evaluation in the file, parsed; other kinds are an error (this is not kubectl)."""
    try:
        text = (stdin or sys.stdin).read() if path == "-" else Path(path).read_text()
    except OSError as error:
        raise UserError(f"Cannot read {path}: {error.strerror}; check the -f path.") from None
    documents = [document.data for document in manifest_file.read_documents(text, "<stdin>" if path == "-" else path)]
    if not documents:
        raise UserError(f"{path} holds no manifest; write an Evaluation (apiVersion: {spec_module.API_VERSION}).")
    return [spec_module.parse_manifest(document) for document in documents]


def output_dir_for(metadata: Mapping[str, Any], spec: spec_module.Evaluation, root: str) -> Path:
    return Path(root) / (spec.output.path or str(metadata["name"]))


def run_in_process(spec: spec_module.Evaluation, output_dir: Path, *, output_root: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="assay-status-") as tmp:
        status_file = Path(tmp) / "status.json"
        results = engine.run_spec(spec, str(output_dir), output_root=output_root, status_file=str(status_file))
        reported = json.loads(status_file.read_text()) if status_file.is_file() else {}
    if results is None:  # one process is rank 0, which always has the results
        raise RuntimeError("the in-process run returned no results")
    # lm-eval's table, as `assay run` prints it (under torchrun the runner's rank 0 prints it);
    # on stderr, since stdout is the status documents a script may read as YAML.
    print(engine.results_tables(results), file=sys.stderr)
    comparison = {"comparison": reported["comparison"]} if "comparison" in reported else {}
    return {**engine.condense_results(results), **comparison}


def torchrun_command(spec: spec_module.Evaluation) -> list[str]:
    return [
        sys.executable,
        "-m",
        "assay.runner.launch",
        "--standalone",
        f"--nproc_per_node={spec.resources.world_size}",
        "--max_restarts=0",
        "-m",
        "assay.runner",
    ]


def run_under_torchrun(
    metadata: Mapping[str, Any], spec: spec_module.Evaluation, output_dir: Path, *, output_root: str
) -> tuple[int, dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="assay-status-") as tmp:
        status_file = Path(tmp) / "status.json"
        # A file, as in a pod: an environment variable over 128 KiB (a long `samples` list) fails the exec.
        spec_file = Path(tmp) / "evaluation.json"
        spec_file.write_text(spec.to_json(), encoding="utf-8")
        env = {
            **os.environ,
            spec_module.ENV_SPEC_FILE: str(spec_file),
            spec_module.ENV_NAME: str(metadata["name"]),
            spec_module.ENV_NAMESPACE: str(metadata.get("namespace") or "default"),
            spec_module.ENV_OUTPUT_DIR: str(output_dir),
            spec_module.ENV_OUTPUT_ROOT: output_root,
            spec_module.ENV_STATUS_FILE: str(status_file),
        }
        code = subprocess.call(torchrun_command(spec), env=env)
        status = json.loads(status_file.read_text()) if status_file.is_file() else {}
    return code, status


def run_one(metadata: Mapping[str, Any], spec: spec_module.Evaluation, *, output_root: str) -> dict[str, Any]:
    if spec.task_sources:
        raise UserError(
            "spec.taskSources names ConfigMaps, which only a cluster has; run without --local, or point "
            "`assay run --include_path DIR` at the task YAMLs."
        )
    validation.validate(spec)
    output_dir = output_dir_for(metadata, spec, output_root)
    output_dir.mkdir(parents=True, exist_ok=True)
    start = datetime.datetime.now(datetime.timezone.utc)
    if spec.resources.world_size > 1:
        code, status = run_under_torchrun(metadata, spec, output_dir, output_root=output_root)
        phase = conditions.SUCCEEDED if code == 0 else conditions.FAILED
        if code != 0:
            status.setdefault("message", f"torchrun exited with code {code}; see the log above.")
    else:
        status = run_in_process(spec, output_dir, output_root=output_root)
        phase = conditions.SUCCEEDED
    end = datetime.datetime.now(datetime.timezone.utc)
    return {
        "phase": phase,
        "model": spec.model_label,
        "outputDir": str(output_dir),
        "startTime": conditions.timestamp(start),
        "completionTime": conditions.timestamp(end),
        **status,
    }


def main(argv: Sequence[str]) -> int:
    """Run each Evaluation of the file; print its status; 1 if any failed. UserError propagates."""
    args = parse_args(argv)
    failed = False
    for metadata, spec in load_manifests(args.filename):
        status = run_one(metadata, spec, output_root=args.output_dir)
        failed = failed or status["phase"] != conditions.SUCCEEDED
        print(f"{metadata['name']}: {status['phase']}, results written to {status['outputDir']}", file=sys.stderr)
        document = {
            "apiVersion": spec_module.API_VERSION,
            "kind": spec_module.KIND,
            "metadata": {"name": metadata["name"]},
            "status": status,
        }
        sys.stdout.write(yaml.safe_dump(document, sort_keys=False, explicit_start=True))
        sys.stdout.flush()
    return 1 if failed else 0
