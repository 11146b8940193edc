"""The chart's runner write policy: a runner patches the status of its own run's Evaluation only.

The ValidatingAdmissionPolicy a real `helm template` renders, its match condition, variables
and validations evaluated by cel-python as kube-apiserver would evaluate them, over the
requests a runner can make: its own run, another Evaluation's, an Evaluation named after
another's Job (where a prefix match would let it through), a token bound to no pod, a change
of status.jobName. tests/e2e/test_permissions.py sends the same requests to kube-apiserver.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import yaml

from assay.operator.build import builders, runner_identity
from tests.operator.helm_chart import CHART, HELM, needs_helm

POD_NAME = "authentication.kubernetes.io/pod-name"


def _policy() -> dict[str, Any]:
    assert HELM is not None
    out = subprocess.run(
        [HELM, "template", "ev", str(CHART), "--namespace", "assay-system"], check=True, capture_output=True, text=True
    ).stdout
    (policy,) = [
        d
        for d in yaml.safe_load_all(out)
        if d and d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"] == "ev-assay-runner-writes"
    ]
    return policy


class RunnerPolicy:
    def __init__(self, document: dict[str, Any]) -> None:
        import celpy

        self.celpy, self.env = celpy, celpy.Environment()
        self.spec = document["spec"]

    def _run(self, expression: str, activation: dict[str, Any]) -> Any:
        return self.env.program(self.env.compile(expression)).evaluate(activation)

    def refusals(
        self, *, user: str, extra: dict[str, list[str]], old: dict[str, Any], new: dict[str, Any]
    ) -> list[str]:
        """The messages of the validations that fail; [] when allowed (or not matched)."""
        types = self.celpy.celtypes
        request = {"userInfo": {"username": user, **({"extra": extra} if extra else {})}}
        activation: dict[str, Any] = {
            "request": self.celpy.json_to_cel(request),
            "object": self.celpy.json_to_cel(new),
            "oldObject": self.celpy.json_to_cel(old),
        }
        for condition in self.spec["matchConditions"]:
            if not self._run(condition["expression"], activation):
                return []
        variables: dict[Any, Any] = {}
        for variable in self.spec["variables"]:
            activation["variables"] = types.MapType(variables)
            variables[types.StringType(variable["name"])] = self._run(variable["expression"], activation)
        activation["variables"] = types.MapType(variables)
        found = []
        for validation in self.spec["validations"]:
            result = self._run(validation["expression"], activation)
            assert isinstance(result, types.BoolType), (validation["expression"], result)
            if not result:
                message = validation.get("message") or str(self._run(validation["messageExpression"], activation))
                found.append(message)
        return found


RUNNER = f"system:serviceaccount:evals:{runner_identity.ACCOUNT}"


def _evaluation(name: str, uid: str) -> tuple[dict[str, Any], str]:
    job = builders.job_name(builders.EvaluationRef(name=name, namespace="evals", uid=uid, generation=1))
    body = {"metadata": {"name": name, "namespace": "evals"}, "status": {"jobName": job, "phase": "Running"}}
    return body, job


def _progress(body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "status": {**body["status"], "progress": {"percent": 50}}}


@pytest.fixture(scope="module")
def policy() -> RunnerPolicy:
    if HELM is None:
        pytest.skip("helm binary not installed")
    return RunnerPolicy(_policy())


@needs_helm
def test_a_runner_writes_its_own_runs_status(policy: RunnerPolicy) -> None:
    body, job = _evaluation("tiny", "uid-tiny")
    for pod in (f"{job}-0-x7k2p", f"{job}-3-bcd45", f"{job}-1023-zz999"):
        assert policy.refusals(user=RUNNER, extra={POD_NAME: [pod]}, old=body, new=_progress(body)) == [], pod


@needs_helm
def test_a_runner_cannot_write_another_evaluation(policy: RunnerPolicy) -> None:
    mine, job = _evaluation("tiny", "uid-tiny")
    theirs, _ = _evaluation("other", "uid-other")
    (refusal,) = policy.refusals(user=RUNNER, extra={POD_NAME: [f"{job}-0-x7k2p"]}, old=theirs, new=_progress(theirs))
    assert refusal.startswith(f"pod {job}-0-x7k2p is not a pod of the Job {theirs['status']['jobName']}")
    assert "a runner writes the status of its own run only" in refusal


@needs_helm
def test_an_evaluation_named_after_anothers_job_cannot_write_it(policy: RunnerPolicy) -> None:
    """`a` runs Job `a-g1-<mark>`; a tenant's Evaluation named `a-g1-<mark>` runs Job
    `a-g1-<mark>-g1-<mark2>`, whose pods begin with `a-g1-<mark>-`: refused, as no prefix is matched."""
    victim, victim_job = _evaluation("a", "uid-a")
    _, attacker_job = _evaluation(victim_job, "uid-attacker")
    pod = f"{attacker_job}-0-x7k2p"
    assert pod.startswith(f"{victim_job}-")
    assert policy.refusals(user=RUNNER, extra={POD_NAME: [pod]}, old=victim, new=_progress(victim)) != []
    # Nor a pod name shaped like an index and a random part on another Job's name.
    for forged in (f"{victim_job}-0-x7k2p-0-abcde", f"{victim_job}-0-x7k2", f"{victim_job}-a-x7k2p", f"{victim_job}"):
        assert policy.refusals(user=RUNNER, extra={POD_NAME: [forged]}, old=victim, new=_progress(victim)) != []


@needs_helm
def test_a_token_bound_to_no_pod_writes_nothing(policy: RunnerPolicy) -> None:
    body, job = _evaluation("tiny", "uid-tiny")
    refusals = policy.refusals(user=RUNNER, extra={}, old=body, new=_progress(body))
    assert refusals and refusals[0].startswith(
        "A runner writes an Evaluation's status only with a token bound to its pod"
    )
    two = {POD_NAME: [f"{job}-0-x7k2p", f"{job}-1-x7k2p"]}
    assert policy.refusals(user=RUNNER, extra=two, old=body, new=_progress(body)) != []


@needs_helm
def test_a_runner_cannot_rebind_its_evaluation_to_another_job(policy: RunnerPolicy) -> None:
    body, job = _evaluation("tiny", "uid-tiny")
    moved = {**body, "status": {**body["status"], "jobName": "other-g1-abcde"}}
    refusals = policy.refusals(user=RUNNER, extra={POD_NAME: [f"{job}-0-x7k2p"]}, old=body, new=moved)
    assert refusals == ["status.jobName is the operator's to write, not a runner's."]
    gone = {**body, "status": {"phase": "Running"}}
    assert policy.refusals(user=RUNNER, extra={POD_NAME: [f"{job}-0-x7k2p"]}, old=body, new=gone) != []


@needs_helm
def test_an_evaluation_without_a_run_is_written_by_no_runner(policy: RunnerPolicy) -> None:
    body, job = _evaluation("tiny", "uid-tiny")
    fresh = {"metadata": body["metadata"]}
    refusals = policy.refusals(user=RUNNER, extra={POD_NAME: [f"{job}-0-x7k2p"]}, old=fresh, new=_progress(body))
    assert any("(none yet)" in r for r in refusals)
    # A job name that is no DNS label is matched by nothing (no pattern is built from it).
    odd = {**body, "status": {"jobName": ".*"}}
    assert policy.refusals(user=RUNNER, extra={POD_NAME: ["x-0-abcde"]}, old=odd, new=_progress(odd)) != []


@needs_helm
def test_other_accounts_are_not_judged(policy: RunnerPolicy) -> None:
    """The operator's own status writes, and every other account: RBAC decides for them."""
    body, _ = _evaluation("tiny", "uid-tiny")
    for user in ("system:serviceaccount:assay-system:ev-assay", "system:serviceaccount:evals:assay-runner-2", "alice"):
        assert policy.refusals(user=user, extra={}, old=body, new=_progress(body)) == []
