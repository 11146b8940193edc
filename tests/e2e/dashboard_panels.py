"""The Grafana dashboard's panels as Prometheus answers them, shared by the e2e tests that query it."""

from __future__ import annotations

import re
from typing import Any

from tests.e2e.conftest import REPO
from tests.e2e.prometheus import query

DASHBOARD = REPO / "deploy" / "helm" / "assay" / "dashboards" / "assay.json"
# Panels whose series exist only for an Evaluation compared with a baseline (spec.baseline):
# the dashboard test has none; the regression-gate test queries them.
NEEDS_BASELINE = (
    "Versus baseline: regressed",
    "Versus baseline: delta with confidence interval",
    "Versus baseline: delta with its interval (bars)",
)


def substituted(expr: str, namespace: str) -> str:
    """A panel's PromQL as Grafana sends it with every variable at "All" (`.*`), the namespace chosen."""
    expr = expr.replace("$namespace", namespace)  # a DNS label: no regex metacharacters
    return re.sub(r"\$\{?(\w+)\}?", ".*", expr)


def panel_series(base: str, panel: dict[str, Any], namespace: str) -> list[dict[str, Any]]:
    return [row for target in panel["targets"] for row in query(base, substituted(target["expr"], namespace))]
