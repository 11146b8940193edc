"""A run's sentinel findings as the results JSON's top-level `sentinels` block.

The block is the one record every consumer reads: the table's marks, the Evaluation's
`ScoresTrusted` condition, the Prometheus label, `assay compare`'s refusal to pass a gate
on an untrusted run (see `RunResults.untrusted`), and `assay check`. Its shape:

    {"trusted": false, "settings": {...},
     "tasks": {"arc_easy": {"trusted": false, "checks": {"degenerate": {"passed": false,
               "documents": 10, ..., "reason": "..."}, ...}, "skipped": [...]}},
     "served": {"trusted": true, "checks": {"retried": {...}, "cut": {...}}}}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from assay.run_options import SentinelSettings
from assay.run_results import TaskResult
from assay.runner.scoring import sentinels
from assay.runner.scoring.sentinels import DocEvidence, Finding


def block(
    tasks: Mapping[str, TaskResult],
    evidence: Mapping[str, Sequence[DocEvidence]],
    settings: SentinelSettings,
    served: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """Every leaf task's checks (groups aggregate their tasks' scores and are not checked again),
    and a served model's request health where the backend counted it."""
    checked: dict[str, Any] = {}
    trusted = True
    for name, task in tasks.items():
        if task.config is None or task.scores is None:
            continue
        result = sentinels.check_task(
            name,
            output_type=str(task.config.get("output_type", "")),
            evidence=evidence.get(name, ()),
            metrics={value.key: value.value for value in task.scores.values},
            settings=settings,
            skip=sentinels.skipped_checks(task.config),
        )
        checked[name] = result.as_dict()
        trusted = trusted and result.trusted
    out: dict[str, Any] = {"trusted": trusted, "settings": settings.as_dict(), "tasks": checked}
    if served is not None:
        findings = sentinels.served_findings(served, settings)
        passed = all(finding.passed for finding in findings)
        out["served"] = {"trusted": passed, **dict(served), "checks": _checks(findings)}
        out["trusted"] = trusted and passed
    return out


def _checks(findings: Sequence[Finding]) -> dict[str, Any]:
    return {finding.check: finding.as_dict() for finding in findings}
