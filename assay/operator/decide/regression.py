"""The condition Regressed: this run against its `spec.baseline`, from the runner's `status.comparison`.

The runner compares on rank 0 after scoring and writes `status.comparison` with the scores
(`assay.runner.results.versus_baseline`); the operator turns it into a condition so that
standard tools gate on it: `kubectl wait --for=condition=Regressed=False`, Argo CD's health
(Degraded while True), the printer column.

- True, reason Regressed: a metric is significantly worse than the baseline by more than
  `spec.gate.maxDrop` (Holm-corrected); the message names the worst and its interval.
  Also True, reason Inconclusive, when `spec.gate.strict` is set and the run was too small
  to tell.
- False, reason NoRegression: improved, unchanged or equivalent.
- Unknown: Inconclusive (too few documents to rule out a drop), BaselineUnavailable (the
  baseline had not succeeded, was on another volume, ...: the message says which), or
  RunFailed (no scores, nothing compared).

Only an Evaluation with `spec.baseline` has the condition, and only once its run ended.
`fails_gate` is the one rule for "this comparison fails the gate": the condition is True
exactly where it holds, and so is the gauge `assay_evaluation_regressed` (1), which the
chart's alert AssayEvaluationRegressed fires on; a strict gate's inconclusive verdict is a
failure in all three.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from assay import echoed_text

REGRESSED = "Regressed"
"""The condition type, and its reason when True."""
NO_REGRESSION, INCONCLUSIVE, BASELINE_UNAVAILABLE, RUN_FAILED = (
    "NoRegression",
    "Inconclusive",
    "BaselineUnavailable",
    "RunFailed",
)
MESSAGE_CHARS = 1024

ConditionValue = tuple[bool | None, str, str]
"""(status — None for Unknown —, reason, message)."""


def regressed(
    status: Mapping[str, Any], spec: Mapping[str, Any] | None, *, succeeded: bool
) -> dict[str, ConditionValue]:
    """The Regressed condition of a finished run ({} without a baseline)."""
    if not (spec or {}).get("baseline"):
        return {}
    if not succeeded:
        return {REGRESSED: (None, RUN_FAILED, "The run failed; nothing was compared with the baseline.")}
    comparison = status.get("comparison")
    if not isinstance(comparison, Mapping):
        return {REGRESSED: (None, BASELINE_UNAVAILABLE, "The runner reported no comparison with the baseline.")}
    # Written by the runner's image: one line, bounded.
    if comparison.get("error"):
        return {REGRESSED: (None, BASELINE_UNAVAILABLE, echoed_text.bounded(str(comparison["error"]), MESSAGE_CHARS))}
    message = echoed_text.bounded(str(comparison.get("message") or ""), MESSAGE_CHARS)
    verdict = comparison.get("verdict")
    if verdict == "regressed":
        return {REGRESSED: (True, REGRESSED, message or "A metric regressed against the baseline.")}
    if verdict == "inconclusive":
        failed = fails_gate(comparison, spec)
        return {REGRESSED: (True if failed else None, INCONCLUSIVE, message or "Too few documents to tell.")}
    return {REGRESSED: (False, NO_REGRESSION, message or "No regression against the baseline.")}


def fails_gate(comparison: Mapping[str, Any], spec: Mapping[str, Any] | None) -> bool:
    """A regressed verdict, or an inconclusive one under `spec.gate.strict`."""
    verdict = comparison.get("verdict")
    strict = bool(((spec or {}).get("gate") or {}).get("strict"))
    return verdict == "regressed" or (verdict == "inconclusive" and strict)
