"""Every refusal is a reason: a child the API server refuses for what it is fails the
Evaluation once, with the API server's words; one that may yet pass is noted and tried again.

The operator's own client (`kube` over `api_session`) talks HTTP to a local API server
(tests/operator/local_apiserver.py) that answers with Status bodies recorded from
kube-apiserver (tests/operator/recorded/api_refusals.json); tests/e2e/test_refusals.py has
a real API server refuse a real Job.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest

from assay import spec as spec_module
from assay.kube import api_errors
from assay.operator.admission.policy import AdminPolicy
from assay.operator.build import builders
from assay.operator.build.runner_settings import RunnerSettings
from assay.operator.decide import conditions, trigger
from assay.operator.kube import kube, refusals
from assay.operator.runtime import converge
from tests.operator.local_apiserver import (
    LocalApiServer,
    api,  # noqa: F401  (fixture)
)

RECORDED = json.loads((Path(__file__).parents[1] / "recorded" / "api_refusals.json").read_text())
T0 = datetime.datetime(2025, 5, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)
EVALUATION = "/apis/assay.dev/v1alpha1/namespaces/evals/evaluations/tiny"
JOBS = "/apis/batch/v1/namespaces/evals/jobs"
SPEC = {"model": "dummy", "tasks": ["arc_easy"], "resources": {"nodes": 1, "gpusPerNode": 0}}
TINY = builders.job_name(builders.EvaluationRef(name="tiny", namespace="evals", uid="uid-tiny", generation=1))
"""The Job of the Evaluation `_evaluation` makes."""


def _refuse_jobs(api: LocalApiServer, name: str | None) -> None:
    answer = RECORDED[name] if name else None
    api.refuse = lambda path, body: (answer["code"], answer) if answer and path == JOBS else None


def _evaluation(api: LocalApiServer, **spec: Any) -> dict[str, Any]:
    evaluation = {
        "apiVersion": "assay.dev/v1alpha1",
        "kind": "Evaluation",
        "metadata": {"name": "tiny", "namespace": "evals", "uid": "uid-tiny", "generation": 1},
        "spec": {**SPEC, **spec},
    }
    api.put(evaluation, EVALUATION)
    return evaluation


def _events(api: LocalApiServer, reason: str) -> list[dict[str, Any]]:
    return [o for p, o in api.objects.items() if "/events/" in p and o.get("reason") == reason]


def _carry_out(evaluation: dict[str, Any]) -> Any:
    spec = spec_module.parse_spec(evaluation["spec"])
    return converge.carry_out(
        evaluation, spec, now=T0, runner=RunnerSettings(default_image="runner:1"), emit=kube.create_event
    )


@pytest.mark.parametrize(
    "name,outcome",
    [
        ("invalid_pod_label_key", "refused"),
        ("undecodable_body", "refused"),
        ("over_the_size_limit", "refused"),
        ("policy_denied", "refused"),
        ("webhook_denied", "refused"),
        ("quota_exceeded", "tried again"),
        ("rbac_denied", "tried again"),
        ("etcd_leader_changed", "tried again"),
        ("too_many_requests", "tried again"),
        ("namespace_terminating", "nothing made"),
        ("already_exists", "nothing made"),
    ],
)
def test_which_answers_to_a_create_are_final(api: LocalApiServer, name: str, outcome: str) -> None:
    _refuse_jobs(api, name)
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "tiny-g1", "namespace": "evals"}}
    if outcome == "nothing made":
        assert kube.create(job) is False
        return
    with pytest.raises(api_errors.ApiError) as raised:
        kube.create(job)
    assert raised.value.code == RECORDED[name]["code"]
    # The Status's reason, or for an answer without one (a webhook's denial) its code's.
    assert raised.value.reason == (RECORDED[name].get("reason") or "Forbidden")
    assert isinstance(raised.value, api_errors.Refused) == (outcome == "refused")
    if outcome == "refused":
        assert isinstance(raised.value, api_errors.Refused) and raised.value.said.startswith(
            RECORDED[name]["message"][:60]
        )


def test_the_api_servers_words_are_one_bounded_line() -> None:
    body = json.dumps(
        {
            "kind": "Status",
            "reason": "Invalid",
            "code": 422,
            "message": 'Job.batch "x" is invalid:\n\x1b[31mforged\x1b[0m line\u202e' + "y" * 5000,
        }
    )
    said = refusals.final(api_errors.from_answer(422, body.encode()))
    assert said is not None and said.startswith('Job.batch "x" is invalid: [31mforged[0m line')
    assert len(said) == refusals.MESSAGE_CHARS and said.isprintable()
    no_status = api_errors.from_answer(422, b"<html>Unprocessable</html>")  # a proxy's: the code says Invalid
    assert no_status.reason == "Invalid" and refusals.final(no_status) == "<html>Unprocessable</html>"


def test_a_refused_job_fails_the_evaluation_once_with_the_api_servers_words(api: LocalApiServer) -> None:
    # A spec the CRD admits and a cluster's own admission refuses (the CRD refuses a bad label key itself).
    evaluation = _evaluation(api, podTemplate={"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]})
    _refuse_jobs(api, "webhook_denied")
    steps = _carry_out(evaluation)
    stored = api.get(EVALUATION)
    assert stored is not None
    status = stored["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "InvalidSpec")
    assert status["message"].startswith(
        f"The API server refused the runner's Job {TINY}: admission webhook "
        '"jobs.policy.example.com" denied the request: tolerations of nvidia.com/gpu'
    )
    assert status["message"].endswith("are spec.podTemplate's).") and steps.refused == status["message"]
    accepted = conditions.get_condition(status, conditions.ACCEPTED)
    assert accepted is not None and (accepted["status"], accepted["reason"]) == ("False", "InvalidSpec")
    assert [e["message"] for e in _events(api, "InvalidSpec")] == [status["message"]]
    assert api.get(f"{JOBS}/{TINY}") is None and not _events(api, "JobCreated")
    # Decided: no retry, no lost Job for the sweep, no second Event when told again.
    assert trigger.finished(stored) and not converge.awaits_job(stored)
    runs = converge.UnfinishedRuns()
    runs.observe(stored)
    assert runs.snapshot() == {}
    assert not converge.reject(stored, status["message"], now=T0, emit=kube.create_event)
    assert len(_events(api, "InvalidSpec")) == 1


def test_annotations_the_api_server_finds_too_large_fail_the_evaluation_with_the_fix(api: LocalApiServer) -> None:
    """Admission bounds the spec the pod carries (`spec_size`); should the API server still find the pod
    template's annotations too large, its words fail the run, with the fields to change."""
    evaluation = _evaluation(api)
    too_long = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "reason": "Invalid",
        "code": 422,
        "message": f'Job.batch "{TINY}" is invalid: spec.template.metadata.annotations: Too long: must have at most '
        "262144 bytes",
    }
    api.refuse = lambda path, body: (422, too_long) if path == JOBS else None
    steps = _carry_out(evaluation)
    status = api.get(EVALUATION)["status"]  # type: ignore[index]
    assert (status["phase"], status["reason"]) == ("Failed", "InvalidSpec") and steps.refused == status["message"]
    assert status["message"].startswith(f"The API server refused the runner's Job {TINY}: Job.batch")
    assert status["message"].endswith("annotations, tolerations, affinity and nodeSelector are spec.podTemplate's).")
    assert api.get(f"{JOBS}/{TINY}") is None


def test_a_quota_is_noted_and_tried_again_and_its_job_is_not_called_lost(api: LocalApiServer) -> None:
    evaluation = _evaluation(api)
    _refuse_jobs(api, "quota_exceeded")
    with pytest.raises(api_errors.ApiError) as raised:
        _carry_out(evaluation)
    assert not isinstance(raised.value, api_errors.Refused)
    stored = api.get(EVALUATION)
    assert stored is not None and stored["status"]["phase"] == "Pending"
    assert stored["status"]["reason"] == converge.JOB_NOT_CREATED
    assert stored["status"]["message"].startswith(
        f'Job {TINY} could not be created yet (jobs.batch "tiny-g1" is forbidden: exceeded quota: job-count'
    )
    assert converge.awaits_job(stored)  # still the sweep's to try again
    _refuse_jobs(api, None)  # a finished Job deleted: the quota has room
    assert converge.recreate(
        stored, admin=AdminPolicy(), runner=RunnerSettings(default_image="runner:1"), emit=kube.create_event, now=T0
    )
    assert api.get(f"{JOBS}/{TINY}") is not None
    assert not _events(api, "JobLost") and len(_events(api, "JobCreated")) == 1
    assert api.get(EVALUATION)["status"]["reason"] == conditions.PODS_PENDING  # type: ignore[index]


def test_a_job_the_policy_no_longer_allows_fails_instead_of_being_retried(api: LocalApiServer) -> None:
    evaluation = _evaluation(api, image="docker.io/someone/runner:1")
    _carry_out(evaluation)
    stored = api.get(EVALUATION)
    api.objects.pop(f"{JOBS}/{TINY}")  # deleted by hand, and meanwhile the admin narrowed the images
    narrowed = AdminPolicy(allowed_image_prefixes=("registry.example/",))
    assert stored is not None
    assert not converge.recreate(
        stored, admin=narrowed, runner=RunnerSettings(default_image="runner:1"), emit=kube.create_event, now=T0
    )
    status = api.get(EVALUATION)["status"]  # type: ignore[index]
    assert (status["phase"], status["reason"]) == ("Failed", "InvalidSpec") and "registry.example/" in status["message"]
    assert len(_events(api, "InvalidSpec")) == 1 and not _events(api, "JobLost")
    assert api.get(f"{JOBS}/{TINY}") is None
