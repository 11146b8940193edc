"""Upgrading the chart on a real API server. Helm installs `crds/` once and never upgrades it,
so the upgrade path in docs/operator.md applies the chart's CRD first (server-side), then runs `helm
upgrade`; this test shows both halves: `helm upgrade` alone leaves a field the new chart adds
unknown (an Evaluation using it is refused), and the documented step adds it."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import CHART, OPERATOR_NAMESPACE, RELEASE, Cluster, chart_values, evaluation_manifest, helm
from tests.e2e.helpers import dummy_spec

pytestmark = pytest.mark.e2e

CRD_FILE = CHART / "crds" / "evaluations.assay.dev.yaml"
NEW_FIELD = "taskSources"  # added after chart 0.1.0's first release


def _previous_crd() -> dict:
    """The CRD as the previous chart shipped it: without the field this chart adds."""
    crd = copy.deepcopy(yaml.safe_load(CRD_FILE.read_text()))
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    del schema["spec"]["properties"][NEW_FIELD]
    del schema["status"]["properties"][NEW_FIELD]
    return crd


def _served_fields(cluster: Cluster) -> set[str]:
    crd = json.loads(cluster.plane.kubectl("get", "crd", "evaluations.assay.dev", "-o", "json").stdout)
    return set(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"])


def test_the_documented_upgrade_path_adds_a_new_crd_field(
    cluster: Cluster, images: dict[str, str], tmp_path: Path
) -> None:
    previous = tmp_path / "previous-crd.yaml"
    previous.write_text(yaml.safe_dump(_previous_crd()))
    cluster.plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(previous))
    try:
        cluster.wait_for("the previous CRD", lambda: NEW_FIELD not in _served_fields(cluster), timeout=30)
        # `helm upgrade` to this chart: its crds/ folder is skipped, the field stays unknown
        # (kubectl's strict field validation refuses it; without it the API server drops it).
        upgrade = helm(
            cluster.plane,
            "upgrade",
            RELEASE,
            str(CHART),
            "--namespace",
            OPERATOR_NAMESPACE,
            *chart_values(images),
            "--wait",
            "--timeout=180s",
        )
        assert NEW_FIELD not in _served_fields(cluster)
        # NOTES.txt: the next commands, for this release.
        assert f"kubectl -n {OPERATOR_NAMESPACE} rollout status deployment/{RELEASE}" in upgrade.stdout, upgrade.stdout
        assert "kubectl wait --for=condition=Ready evaluation/tiny-gpt2-smoke" in upgrade.stdout
        assert "kubectl apply --server-side --force-conflicts -f deploy/helm/assay/crds/" in upgrade.stdout
        spec = dummy_spec(suspend=True, taskSources=[{"configMap": "suite-tasks"}])
        refused = cluster.kubectl(
            "apply", "-f", "-", input=yaml.safe_dump(evaluation_manifest("old", **spec)), check=False
        )
        assert refused.returncode != 0 and f'unknown field "spec.{NEW_FIELD}"' in refused.stderr, refused.stderr

        # The documented step (docs/operator.md): the chart's CRD, applied server-side, before (or after) helm upgrade.
        cluster.plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
        cluster.wait_for("the new CRD", lambda: NEW_FIELD in _served_fields(cluster), timeout=30)
        applied = cluster.kubectl(
            "apply", "-o", "json", "-f", "-", input=yaml.safe_dump(evaluation_manifest("new", **spec))
        )
        assert json.loads(applied.stdout)["spec"][NEW_FIELD] == [{"configMap": "suite-tasks"}]
        cluster.operator.wait_watching()
    finally:
        cluster.plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
