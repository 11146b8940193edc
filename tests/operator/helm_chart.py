"""The Helm chart as tests render it: `helm template` by a real `helm` binary, when one is installed.

Shared by the chart's tests (test_operator_helm, test_operator_chart_*, the policy tests that
read what the chart passes the operator) and the local Prometheus fixture.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "assay"
HELM = shutil.which("helm") or next(
    (
        str(p)
        for p in [Path.home() / ".cache" / "assay" / "bin" / "helm", Path.home() / "go" / "bin" / "helm"]
        if p.is_file()
    ),
    None,
)
needs_helm = pytest.mark.skipif(
    HELM is None, reason="helm binary not installed (go install helm.sh/helm/v3/cmd/helm@v3.16.4)"
)


def render(*args: str) -> list[dict[str, Any]]:
    """The chart's documents as `helm template ev CHART --namespace assay-system ARGS...` renders them."""
    assert HELM is not None
    out = subprocess.run(
        [HELM, "template", "ev", str(CHART), "--namespace", "assay-system", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def render_values(*values: str) -> list[dict[str, Any]]:
    """`render` with each of `values` (KEY=VALUE) given by --set."""
    return render(*(a for value in values for a in ("--set", value)))


def operator_container(documents: list[dict[str, Any]]) -> dict[str, Any]:
    """The operator Deployment's container (its args and env: what the chart tells the operator)."""
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    return dict(deployment["spec"]["template"]["spec"]["containers"][0])
