"""Shared step of the e2e tests of refused specs: apply, wait for the refusal, check nothing ran."""

from __future__ import annotations

from typing import Any

from tests.e2e.conftest import Cluster, evaluation_manifest


def refused(cluster: Cluster, name: str, spec: dict[str, Any]) -> str:
    """Apply `spec`; wait until it is refused; check that nothing ran. Returns the message."""
    cluster.apply(evaluation_manifest(name, **spec))
    status = cluster.wait(name, "Failed", timeout=60)["status"]
    accepted = {c["type"]: c for c in status["conditions"]}["Accepted"]
    assert accepted["status"] == "False" and accepted["reason"] == "InvalidSpec", status
    assert status["message"].count(". ") == 0 and status["message"].endswith("."), status["message"]
    assert cluster.items("jobs", f"assay.dev/evaluation={name}") == []
    assert cluster.items("serviceaccounts", f"assay.dev/evaluation={name}") == []
    event = cluster.wait_for(
        f"the InvalidSpec Event of {name}", lambda: cluster.events(name).get("InvalidSpec"), timeout=30
    )
    assert event == status["message"]
    return str(status["message"])
