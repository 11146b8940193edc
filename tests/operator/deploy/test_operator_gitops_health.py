"""The Argo CD health check (deploy/argocd/health.lua), run in Lua on Evaluations recorded
from real e2e runs (tests/e2e/test_gitops.py with ASSAY_RECORD_STATUSES=1), and the snippet in
docs/operator.md that installs it."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.argocd_health import SCRIPT, argocd_health

RECORDED = Path(__file__).parents[1] / "recorded"
OPERATOR_DOC = Path(__file__).resolve().parents[3] / "docs" / "operator.md"

# What each recorded Evaluation is, as Argo CD must show it.
EXPECTED = {
    "created": "Progressing",  # as `kubectl apply` returned it: no status yet
    "running": "Progressing",
    "suspended": "Suspended",
    "succeeded": "Healthy",
    "failed_invalidspec": "Degraded",
    "failed_podfailurepolicy": "Degraded",
}


def _recorded(case: str) -> dict[str, Any]:
    return dict(json.loads((RECORDED / f"evaluation_{case}.json").read_text()))


def test_every_recorded_evaluation_is_covered() -> None:
    cases = {p.stem.removeprefix("evaluation_") for p in RECORDED.glob("evaluation_*.json")}
    assert cases == set(EXPECTED)


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_health_of_a_recorded_evaluation(case: str) -> None:
    evaluation = _recorded(case)
    health, message = argocd_health(evaluation)
    assert health == EXPECTED[case], message
    status = evaluation.get("status")
    if status is None:
        assert message == "Waiting for the Assay operator to accept the Evaluation."
    else:
        # The operator's own words reach Argo CD's UI (why a run failed, what it waits for).
        assert message.startswith(status["message"])


@pytest.mark.parametrize("case", ["succeeded", "failed_invalidspec"])
def test_a_spec_change_the_operator_has_not_seen_is_progressing_not_the_old_outcome(case: str) -> None:
    evaluation = copy.deepcopy(_recorded(case))
    evaluation["metadata"]["generation"] = evaluation["status"]["observedGeneration"] + 1
    health, message = argocd_health(evaluation)
    assert health == "Progressing"
    assert message == f"Waiting for the Assay operator to observe generation {evaluation['metadata']['generation']}."


def test_a_running_evaluation_shows_its_progress() -> None:
    evaluation = copy.deepcopy(_recorded("running"))
    evaluation["status"]["progress"] = {"requestsDone": 3, "requestsTotal": 12, "summary": "25%"}
    assert argocd_health(evaluation) == ("Progressing", f"{evaluation['status']['message']} Progress: 25%.")


@pytest.mark.parametrize("case", sorted(set(EXPECTED) - {"created"}))
def test_recorded_statuses_keep_kstatus_ready_as_neither_reconciling_nor_stalled(case: str) -> None:
    status = _recorded(case)["status"]
    conditions = {c["type"]: c for c in status["conditions"]}
    ready, reconciling, stalled = (conditions[t]["status"] == "True" for t in ("Ready", "Reconciling", "Stalled"))
    assert ready == (not reconciling and not stalled)
    assert ready == (status["phase"] == "Succeeded") and stalled == (status["phase"] == "Failed")
    assert all(c["observedGeneration"] == status["observedGeneration"] for c in conditions.values())


def test_the_operator_doc_installs_exactly_the_shipped_health_check() -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", OPERATOR_DOC.read_text(), flags=re.S)
    (config_map,) = [yaml.safe_load(b) for b in blocks if "resource.customizations.health" in b]
    assert config_map["metadata"]["name"] == "argocd-cm"
    assert config_map["data"]["resource.customizations.health.assay.dev_Evaluation"] == SCRIPT.read_text()


@pytest.mark.parametrize("regressed,health", [("True", "Degraded"), ("False", "Healthy"), ("Unknown", "Healthy")])
def test_a_run_that_regressed_against_its_baseline_is_degraded(regressed: str, health: str) -> None:
    evaluation = copy.deepcopy(_recorded("succeeded"))
    message = "Regressed against model-v1: arc_easy acc -0.0600 [-0.0900, -0.0300], Holm p = 0.001."
    evaluation["status"]["conditions"].append(
        {
            "type": "Regressed",
            "status": regressed,
            "reason": "Regressed",
            "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    )
    state, said = argocd_health(evaluation)
    assert state == health
    assert (said == message) is (health == "Degraded")
