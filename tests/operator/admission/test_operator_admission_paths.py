"""Every path that may start a run is admitted by the one admission function, `admission.admit.admit`.

A rule added to that function refuses the run on each path: a new decision, a rerun, a Job
deleted by hand (its DELETED watch event) and a Job the lost-Job sweep finds missing. The
rule here is one more check after the real ones (the real policy, Secrets' consent and size
checks run first); a path that checked the spec itself without calling `admit`, as the
lost-Job path once did, would create the Job again and fail here.

The operator's own client talks HTTP to a local API server (tests/operator/local_apiserver.py);
the engine's task index is not what is tested, so the task check is a stand-in that knows every task.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from assay.errors import UserError
from assay.operator import handlers
from assay.operator.admission import admit, validation
from assay.operator.admission.policy import AdminPolicy
from assay.operator.build import builders
from assay.operator.runtime import converge
from assay.operator.runtime.state import OperatorState
from tests.operator.local_apiserver import (
    LocalApiServer,
    api,  # noqa: F401  (fixture)
)

EVALUATION = "/apis/assay.dev/v1alpha1/namespaces/evals/evaluations/tiny"
JOBS = "/apis/batch/v1/namespaces/evals/jobs"
SPEC = {"model": "dummy", "tasks": ["arc_easy"], "resources": {"nodes": 1, "gpusPerNode": 0}}
REFUSAL = "spec.systemInstruction 'no' is refused by the rule added to the admission."


class AddedRule:
    """A rule added at the end of `admit`: once on, a spec whose systemInstruction is "no" is refused."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.on = False
        self.calls = 0
        original = admit.admit

        def admit_with_the_rule(raw_spec: Mapping[str, Any], **given: Any) -> admit.Admitted:
            admitted = original(raw_spec, **given)
            self.calls += 1
            if self.on and admitted.spec.system_instruction == "no":
                raise UserError(REFUSAL)
            return admitted

        monkeypatch.setattr(admit, "admit", admit_with_the_rule)


@pytest.fixture
def rule(monkeypatch: pytest.MonkeyPatch) -> AddedRule:
    monkeypatch.setattr(validation, "validate_with_sources", lambda spec, **_: [])
    return AddedRule(monkeypatch)


def _accepted_run(api: LocalApiServer, state: OperatorState) -> dict[str, Any]:
    """An Evaluation whose run was decided while the rule was off: its Job exists."""
    evaluation = {
        "apiVersion": "assay.dev/v1alpha1",
        "kind": "Evaluation",
        "metadata": {"name": "tiny", "namespace": "evals", "uid": "uid-tiny", "generation": 1},
        "spec": {**SPEC, "systemInstruction": "no"},
    }
    api.put(evaluation, EVALUATION)
    handlers.decide_run(evaluation, state=state)
    stored = api.get(EVALUATION)
    assert stored is not None and stored["status"]["phase"] != "Failed" and stored["status"].get("jobName")
    assert api.get(f"{JOBS}/{stored['status']['jobName']}") is not None
    return stored


def _refused(api: LocalApiServer) -> bool:
    status = api.get(EVALUATION)["status"]  # type: ignore[index]
    jobs = [path for path in api.objects if path.startswith(f"{JOBS}/")]
    return (status["phase"], status["reason"], status["message"], jobs) == ("Failed", "InvalidSpec", REFUSAL, [])


def _lose_the_job(api: LocalApiServer, stored: dict[str, Any]) -> dict[str, Any]:
    return api.objects.pop(f"{JOBS}/{stored['status']['jobName']}")


def test_a_new_decision_and_a_rerun_meet_the_rule(api: LocalApiServer, rule: AddedRule) -> None:
    state = OperatorState(policy=AdminPolicy())
    stored = _accepted_run(api, state)
    rule.on = True
    stored["metadata"]["annotations"] = {builders.ANNOTATION_RERUN: "again"}
    api.put(stored, EVALUATION)
    handlers.decide_run(stored, state=state)
    assert rule.calls == 2
    status = api.get(EVALUATION)["status"]  # type: ignore[index]
    assert (status["phase"], status["reason"], status["message"]) == ("Failed", "InvalidSpec", REFUSAL)


def test_a_job_deleted_by_hand_is_not_made_again_past_the_rule(api: LocalApiServer, rule: AddedRule) -> None:
    state = OperatorState(policy=AdminPolicy())
    stored = _accepted_run(api, state)
    job = _lose_the_job(api, stored)
    rule.on = True
    handlers._job_deleted(job, state)
    assert rule.calls == 2 and _refused(api)


def test_a_job_the_sweep_finds_lost_is_not_made_again_past_the_rule(api: LocalApiServer, rule: AddedRule) -> None:
    state = OperatorState(policy=AdminPolicy())
    stored = _accepted_run(api, state)
    _lose_the_job(api, stored)
    clock = [0.0]
    runs = converge.UnfinishedRuns(clock=lambda: clock[0])
    runs.observe(stored)
    errors: list[tuple[str, str]] = []
    sweeper = converge.LostJobSweeper(
        runs=runs, admin=state.policy, runner=state.runner, on_error=lambda *error: errors.append(error), state=state
    )
    clock[0] = converge.LOST_JOB_SWEEP_INTERVAL + 1
    rule.on = True
    sweeper.sweep()
    assert not errors and rule.calls == 2 and _refused(api)


def test_without_the_rule_the_lost_job_is_made_again(api: LocalApiServer, rule: AddedRule) -> None:
    """The rule, not something else on the path, is what refused the Job above."""
    state = OperatorState(policy=AdminPolicy())
    stored = _accepted_run(api, state)
    job = _lose_the_job(api, stored)
    handlers._job_deleted(job, state)
    assert rule.calls == 2 and api.get(f"{JOBS}/{stored['status']['jobName']}") is not None


ADMISSION_CHECKS = {
    ("policy", "check"),
    ("policy", "enforce"),
    ("secret_consent", "check"),
    ("spec_size", "check"),
    ("validation", "validate_with_sources"),
}
"""What `admit` calls, in its order; no other operator module may call them itself."""


def test_only_the_admission_function_calls_the_admission_checks() -> None:
    operator = Path(admit.__file__).resolve().parents[1]
    callers: dict[str, set[tuple[str, str]]] = {}
    for path in sorted(operator.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and (node.func.value.id, node.func.attr) in ADMISSION_CHECKS
            ):
                callers.setdefault(str(path.relative_to(operator)), set()).add((node.func.value.id, node.func.attr))
    assert callers == {"admission/admit.py": ADMISSION_CHECKS}
