"""examples/suite applied as GitOps would: `kubectl apply -k` of an overlay that points the
suite's four Evaluations at what this cluster has (lm-eval's dummy model, the local
volumes); each one, its task from the suite's own ConfigMap included, reaches Succeeded,
which `kubectl wait --for=condition=Ready` on the suite's label sees and Argo CD calls Healthy."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.argocd_health import argocd_health
from tests.e2e.conftest import Cluster
from tests.e2e.helpers import LIMIT, VOLUMES

pytestmark = pytest.mark.e2e

SUITE = Path(__file__).resolve().parents[2] / "examples" / "suite"


def _overlay(path: Path, namespace: str) -> Path:
    patch = [
        {"op": "replace", "path": "/spec/model", "value": "dummy"},
        {"op": "remove", "path": "/spec/modelArgs"},
        {"op": "replace", "path": "/spec/batchSize", "value": 4},
        {"op": "add", "path": "/spec/limit", "value": LIMIT},
        {"op": "replace", "path": "/spec/resources", "value": {"nodes": 1, "gpusPerNode": 0}},
        {"op": "replace", "path": "/spec/cache", "value": VOLUMES["cache"]},
        {"op": "replace", "path": "/spec/output", "value": VOLUMES["output"]},
    ]
    path.mkdir()
    (path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "namespace": namespace,
                "resources": [os.path.relpath(SUITE, path)],  # kustomize takes bases by relative path only
                "patches": [{"target": {"group": "assay.dev", "kind": "Evaluation"}, "patch": yaml.safe_dump(patch)}],
            }
        )
    )
    return path


def test_the_suite_applied_with_kustomize_succeeds_evaluation_by_evaluation(cluster: Cluster, tmp_path: Path) -> None:
    overlay = _overlay(tmp_path / "e2e", cluster.namespace)
    cluster.kubectl("apply", "-k", str(overlay))
    selector = "assay.dev/suite=reasoning-v1"
    names = sorted(e["metadata"]["name"] for e in cluster.items("evaluations", selector))
    assert names == ["pythia-160m-arc-easy-qa", "pythia-160m-lambada", "pythia-410m-arc-easy-qa", "pythia-410m-lambada"]
    result = cluster.kubectl(
        "wait", "--for=condition=Ready", "evaluations", "-l", selector, "--timeout=300s", check=False, timeout=330
    )
    assert result.returncode == 0, f"{result.stderr}\n{cluster.diagnostics()}"
    (config_map,) = cluster.items("configmaps", selector)
    for evaluation in cluster.items("evaluations", selector):
        status = evaluation["status"]
        assert status["phase"] == "Succeeded", json.dumps(status)
        assert argocd_health(evaluation)[0] == "Healthy"
        (task,) = evaluation["spec"]["tasks"]
        assert set(status["results"]) == {task} and status["nSamples"][task]["effective"] == LIMIT
        # The generated ConfigMap, under its hashed name, is what each run checked.
        assert status["taskSources"] == [
            {
                "configMap": config_map["metadata"]["name"],
                "resourceVersion": config_map["metadata"]["resourceVersion"],
                "tasks": ["arc_easy_qa", "suite_qa"],
            }
        ]
    assert config_map["metadata"]["name"].startswith("suite-tasks-")
