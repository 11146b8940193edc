"""spec.limit on a real kube-apiserver: the CRD's CEL rule refuses what `assay run --limit` and
spec.limit refuse (1.5: lm-eval would run int(1.5) = 1 document silently) and takes the rest.

tests/cli/test_validator_corpus.py checks the same rule with cel-python; this is the API server's
own CEL (a number field reaches it as a double, an integer one too), with `--dry-run=server`, so
nothing is stored."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.e2e.cluster import control_plane as cp
from tests.e2e.conftest import CHART

pytestmark = pytest.mark.e2e


def _evaluation(limit: Any) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "assay.dev/v1alpha1",
            "kind": "Evaluation",
            "metadata": {"name": "limit-check", "namespace": "default"},
            "spec": {"model": "dummy", "tasks": ["arc_easy"], "limit": limit},
        }
    )


@pytest.fixture(scope="module")
def crd(control_plane: cp.ControlPlane) -> cp.ControlPlane:
    path = CHART / "crds" / "evaluations.assay.dev.yaml"
    control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    control_plane.kubectl("wait", "--for=condition=Established", "crd/evaluations.assay.dev", "--timeout=60s")
    return control_plane


@pytest.mark.parametrize(
    "limit,accepted", [(1.5, False), (20.5, False), (2, True), (2.0, True), (20, True), (0.5, True)]
)
def test_the_api_server_takes_a_whole_count_or_a_fraction(crd: cp.ControlPlane, limit: Any, accepted: bool) -> None:
    done = crd.kubectl("create", "--dry-run=server", "-f", "-", input=_evaluation(limit), check=False)
    assert (done.returncode == 0) is accepted, done.stderr
    if not accepted:
        assert "limit is a whole count of documents per task, or a fraction below 1.0" in done.stderr, done.stderr
