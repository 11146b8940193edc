"""What each exit code of the runner means to its Job: the podFailurePolicy.

The runner's exit codes are its contract with the Job (`assay.spec`): some failures are the
spec's and fail the same way on every retry, some are not the evaluation's fault at all.
"""

from __future__ import annotations

from typing import Any

from assay import spec as spec_module

Manifest = dict[str, Any]


def pod_failure_policy() -> Manifest:
    return {
        "rules": [
            # A spec that cannot run fails the same way on every retry.
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [spec_module.CONFIG_ERROR_EXIT_CODE]}},
            # A rank that stopped because another reported its failure: that one's exit counts.
            {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [spec_module.PEER_FAILED_EXIT_CODE]}},
            # Preemption, eviction, node drain: not the evaluation's fault.
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            # Scores computed but refused by the API server (or it stayed away): a retry would
            # redo the whole evaluation to meet the same refusal; the operator says
            # ResultsNotRecorded. After the disruption rule: a preempted pod still retries.
            {
                "action": "FailJob",
                "onExitCodes": {"operator": "In", "values": [spec_module.RESULTS_NOT_RECORDED_EXIT_CODE]},
            },
        ]
    }
