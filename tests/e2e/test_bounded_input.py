"""Bounded input on the real control plane.

The CRD admits a 200 KiB `samples` list and the run gets all of it: the spec reaches the
runner as a mounted file (an environment variable over 128 KiB would keep the container from
starting), and the operator decides the run from the whole spec although it keeps only the
small fields of a spec that large. A list past the CRD's bound is refused by the API server
when it is created, in its words, before the operator sees anything.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import Cluster, evaluation_manifest
from tests.e2e.helpers import dummy_spec

pytestmark = pytest.mark.e2e

CRD = Path(__file__).resolve().parents[2] / "deploy" / "crds" / "evaluations.assay.dev.yaml"
ARC_EASY_TEST_DOCS = 2376


def _samples_bound() -> int:
    crd = yaml.safe_load(CRD.read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return int(spec["properties"]["samples"]["additionalProperties"]["maxItems"])


def _create(cluster: Cluster, manifest: dict[str, Any], *, check: bool = True) -> Any:
    # `kubectl create`, not apply: apply would copy the whole object into an annotation.
    return cluster.kubectl("create", "-f", "-", input=json.dumps(manifest), check=check)


def test_a_200_kib_samples_list_runs_and_reaches_the_runner_whole(cluster: Cluster) -> None:
    name = "many-samples"
    samples = list(range(ARC_EASY_TEST_DOCS)) * 19  # every document, 19 times over
    assert len(json.dumps(samples)) > 200 * 1024
    spec = dummy_spec(samples={"arc_easy": samples})
    del spec["limit"]  # `limit` or `samples`, not both
    _create(cluster, evaluation_manifest(name, **spec))

    status = cluster.wait(name, "Succeeded", timeout=300)["status"]
    assert "arc_easy" in status["results"], status
    (job,) = cluster.items("jobs", f"assay.dev/evaluation={name}")
    container = job["spec"]["template"]["spec"]["containers"][0]
    env_bytes = sum(len(json.dumps(e)) for e in container.get("env") or ())
    assert env_bytes < 8 * 1024 and not [e for e in container["env"] if e["name"] == "ASSAY_EVALUATION"]
    # The spec is in the pod template's annotation, which the runner reads as a file; no ConfigMap per run.
    assert cluster.items("configmaps", f"assay.dev/evaluation={name}") == []
    spec_text = job["spec"]["template"]["metadata"]["annotations"]["assay.dev/spec"]
    assert json.loads(spec_text)["samples"]["arc_easy"] == samples
    # Duplicates select a document once, as lm-eval's --samples does: every document ran.
    logs = cluster.runner_logs()
    assert "Traceback" not in logs, logs[-3000:]


def test_a_samples_list_past_the_crds_bound_is_refused_at_create(cluster: Cluster) -> None:
    bound = _samples_bound()
    spec = dummy_spec(samples={"arc_easy": [0] * (bound + 1)})
    del spec["limit"]
    refused = _create(cluster, evaluation_manifest("too-many-samples", **spec), check=False)
    assert refused.returncode != 0
    assert "spec.samples.arc_easy" in refused.stderr and f"must have at most {bound} items" in refused.stderr, (
        refused.stderr[-2000:]
    )
    assert not cluster.kubectl("get", "evaluation", "too-many-samples", check=False).returncode == 0


@pytest.mark.parametrize(
    "pod_template,field",
    [
        ({"labels": {"bad key!": "x"}}, "spec.podTemplate.labels"),
        ({"nodeSelector": {"disk": "not a value!"}}, "spec.podTemplate.nodeSelector"),
        ({"tolerations": [{"key": "gpu", "operator": "Sometimes"}]}, "spec.podTemplate.tolerations[0].operator"),
    ],
)
def test_pod_template_fields_kubernetes_would_refuse_are_refused_at_create(
    cluster: Cluster, pod_template: dict[str, Any], field: str
) -> None:
    refused = cluster.apply(evaluation_manifest("bad-template", **dummy_spec(podTemplate=pod_template)), check=False)
    assert refused.returncode != 0 and field in refused.stderr, refused.stderr[-2000:]
