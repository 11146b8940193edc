"""`assay check RUN` (its flags: `assay.check_command`): the run's sentinels, recomputed
from an lm-eval or Assay output folder.

The same checks a run makes of its own scores (`scoring.sentinels`), on what it wrote: the
results JSON (each task's output type, metadata and aggregated metrics) and the samples
JSONL beside it (each document's responses). A task without samples gets the checks its
results allow (metric ranges). A served model's request health cannot be read back from
files: where the results JSON carries Assay's own `sentinels` block, its served findings
are kept.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from assay.compare import outputs
from assay.errors import UsageError
from assay.run_options import SentinelSettings
from assay.run_results import RunResults
from assay.runner.results import sentinel_report
from assay.runner.results.table import render_markdown
from assay.runner.scoring import sentinel_evidence
from assay.runner.scoring.sentinels import DocEvidence


def check(path: str | Path, settings: SentinelSettings) -> dict[str, Any]:
    """The sentinels block of the run at `path`, recomputed from its files."""
    run_output = outputs.read_run(path, label="RUN")
    results = run_output.results
    evidence: dict[str, list[DocEvidence]] = {}
    unchecked: list[str] = []
    for name in results.results_names():
        config = results.config_of(name)
        samples = run_output.samples_paths.get(name)
        if not config:
            continue
        if samples is None or samples.name.startswith("scores_"):
            unchecked.append(name)
            continue
        evidence[name] = sentinel_evidence.from_samples(str(config.get("output_type", "")), _lines(samples))
    leaves = {name: task for name, task in results.tasks.items() if name in results.results_names()}
    block = sentinel_report.block(leaves, evidence, settings, _served(results))
    if unchecked:
        block["without_samples"] = unchecked
    return block


def _served(results: RunResults) -> Mapping[str, int] | None:
    stored = results.sentinels()
    served = stored.get("served") if stored is not None else None
    if not isinstance(served, Mapping):
        return None
    return {key: value for key, value in served.items() if isinstance(value, int) and not isinstance(value, bool)}


def _lines(path: Path) -> list[dict[str, Any]]:
    kept: list[dict[str, Any]] = []
    try:
        with path.open(encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    raise UsageError(f"{path} line {number} is not JSON; is it a samples file from a run?") from None
                if isinstance(record, dict):
                    # only what the evidence reads: a document and its prompt can be large
                    kept.append({key: record.get(key) for key in ("doc_id", "resps", "filtered_resps", "acc")})
                    kept[-1].update({"acc_mutual_info": 0} if "acc_mutual_info" in record else {})
    except OSError as error:
        raise UsageError(f"{path} cannot be read ({error.strerror}).") from None
    return kept


def render(block: Mapping[str, Any]) -> str:
    """One row per check: task, check, passed or FAILED, and its figures or reason."""
    rows: list[list[Any]] = []
    parts = list(_mapping(block.get("tasks")).items())
    if "served" in block:
        parts.append(("(served model)", _mapping(block["served"])))
    for name, entry in parts:
        for check, finding in _mapping(_mapping(entry).get("checks")).items():
            finding = _mapping(finding)
            passed = finding.get("passed") is True
            rows.append([name, check, "passed" if passed else "FAILED", finding.get("reason") or _figures(finding)])
            name = ""
        for skipped in _mapping(entry).get("skipped") or ():
            rows.append([name, skipped, "skipped", "the task's metadata says it does not apply"])
            name = ""
    lines = [render_markdown(["Tasks", "Check", "Result", "Figures"], rows)]
    if block.get("without_samples"):
        lines.append("Without samples (run with --log_samples for every check): " + ", ".join(block["without_samples"]))
    lines.append(
        "Scores trusted: every check passed." if block.get("trusted") else "Scores NOT trusted: a check failed."
    )
    return "\n".join(lines)


def _figures(finding: Mapping[str, Any]) -> str:
    shown = []
    for key, value in finding.items():
        if key in ("passed", "reason", "limit", "alpha") or isinstance(value, Mapping):
            continue
        shown.append(f"{key} {value:.3g}" if isinstance(value, float) else f"{key} {value}")
    return ", ".join(shown)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
