"""A tenant's task YAML is parsed within bounds by the operator on the real control plane.

Before the bounds, a 60 KB ConfigMap nested 30,000 levels killed the cluster-wide operator
(SIGSEGV in libyaml's composer) at every start, and a 547-byte alias bomb held a handler
thread for minutes. Each is now refused as InvalidSpec in seconds, the operator does not
restart, and an Evaluation in another namespace is decided meanwhile."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.e2e.conftest import Cluster, evaluation_manifest, restricted_namespace
from tests.e2e.helpers import dummy_spec
from tests.engine.yaml_bombs import alias_bomb, nested

pytestmark = pytest.mark.e2e


def _config_map(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def _restarts(cluster: Cluster) -> int:
    return sum(int(s.get("restartCount", 0)) for s in cluster.operator.pod()["status"]["containerStatuses"])


def test_a_deeply_nested_config_map_and_an_alias_bomb_are_refused_while_another_namespace_is_decided(
    cluster: Cluster,
) -> None:
    plane = cluster.plane
    neighbour = f"{cluster.namespace}-b"
    restricted_namespace(plane, neighbour)
    try:
        restarts = _restarts(cluster)
        deep, bomb = nested(30_000), alias_bomb()
        assert len(deep) > 60_000 and len(bomb.encode()) <= 547
        cluster.apply(_config_map("deep-tasks", {"deep.yaml": deep}))
        cluster.apply(_config_map("bomb-tasks", {"bomb.yaml": bomb}))
        started = time.monotonic()
        for name in ("deep", "bomb"):
            spec = dummy_spec(tasks=["nested"], taskSources=[{"configMap": f"{name}-tasks"}])
            cluster.apply(evaluation_manifest(name, **spec))
        plane.kubectl(
            "-n", neighbour, "apply", "-f", "-", input=json.dumps(evaluation_manifest("neighbour", **dummy_spec()))
        )

        messages = {}
        for name in ("deep", "bomb"):
            status = cluster.wait(name, "Failed", timeout=90)["status"]
            assert status["reason"] == "InvalidSpec", status
            messages[name] = status["message"]
            assert cluster.events(name).get("InvalidSpec") == status["message"]
            assert cluster.items("jobs", f"assay.dev/evaluation={name}") == []
        assert time.monotonic() - started < 90
        assert messages["deep"] == (
            "spec.taskSources: ConfigMap 'deep-tasks' key 'deep.yaml': It nests collections deeper than 64 levels "
            "(line 5); a task file is shallow: flatten it."
        )
        assert messages["bomb"].startswith(
            "spec.taskSources: ConfigMap 'bomb-tasks' key 'bomb.yaml': It holds more than"
        )
        assert "lol" not in messages["bomb"]

        def neighbour_decided() -> dict[str, Any] | None:
            found = json.loads(plane.kubectl("-n", neighbour, "get", "evaluation", "neighbour", "-o", "json").stdout)
            return found if (found.get("status") or {}).get("jobName") else None

        cluster.wait_for("the other namespace's Evaluation to be decided", neighbour_decided, timeout=90)
        assert _restarts(cluster) == restarts, cluster.operator.tail()
    finally:
        plane.kubectl("delete", "namespace", neighbour, "--wait=false", check=False)
