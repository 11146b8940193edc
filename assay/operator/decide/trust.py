"""The condition ScoresTrusted: the run's own sentinels, from the runner's `status.sentinels`.

Every run checks its scores before it reports them (`assay.runner.scoring.sentinels`):
multiple choice significantly below chance, choices all scored alike, empty, unparsed or
truncated answers, a served model's retries, metrics out of range. The runner writes the
findings with the scores; the operator shows them as a condition, so that tools gate on it
(`kubectl wait --for=condition=ScoresTrusted`):

- True, reason ChecksPassed: every check passed.
- False, reason SentinelsFailed: a check failed; the message names the task and why. The
  run still ends Succeeded (its scores are in status), unless `spec.sentinels.strict` is
  set: then it ends Failed with reason ScoresUntrusted.

Absent when the run made no checks (`spec.sentinels.enabled: false`, or a runner image
older than the checks) and until a run has ended.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from assay import echoed_text

SCORES_TRUSTED = "ScoresTrusted"
"""The condition type."""
CHECKS_PASSED, SENTINELS_FAILED, SCORES_UNTRUSTED = "ChecksPassed", "SentinelsFailed", "ScoresUntrusted"
"""Its reasons, and the reason of a strict run's failure."""
MESSAGE_CHARS = 1024

ConditionValue = tuple[bool | None, str, str]


def scores_trusted(status: Mapping[str, Any]) -> dict[str, ConditionValue]:
    """The ScoresTrusted condition of a run whose scores are in status ({} without findings)."""
    found = status.get("sentinels")
    if not isinstance(found, Mapping) or not isinstance(found.get("trusted"), bool):
        return {}
    # Written by the runner's image: one line, bounded.
    message = echoed_text.bounded(str(found.get("message") or ""), MESSAGE_CHARS)
    if found["trusted"]:
        return {SCORES_TRUSTED: (True, CHECKS_PASSED, message or "Every sentinel check passed.")}
    return {SCORES_TRUSTED: (False, SENTINELS_FAILED, message or "A sentinel check failed.")}


def fails_strict_run(status: Mapping[str, Any], spec: Mapping[str, Any] | None) -> str | None:
    """The failure message of a run whose sentinels failed under `spec.sentinels.strict`, else None."""
    sentinels = (spec or {}).get("sentinels")
    if not isinstance(sentinels, Mapping) or sentinels.get("strict") is not True:
        return None
    condition = scores_trusted(status).get(SCORES_TRUSTED)
    if condition is None or condition[0] is not False:
        return None
    return f"The scores are not trusted and spec.sentinels.strict is set: {condition[2]}"
