"""A sequential gate on the real node: with `gate.sequential: true` a runner scores arc_easy in a
seeded random order, chunk by chunk, and stops once its anytime-valid interval decides.

A baseline run of the tiny GPT-2 on 320 documents; a crafted copy of it that answered every
document right (the tiny model, about a quarter right, is then clearly worse); the same spec
against the crafted baseline stops early Regressed=True, and against its own baseline stops
early Regressed=False, each on fewer documents than the task has, with status, the condition,
`kubectl get` and the operator's /metrics (assay_evaluation_documents_saved) saying so.

Each candidate runs a second time on two ranks (`nodes: 2`: an Indexed Job of two pods under
torchrun, gloo on CPU): rank 0 decides after each chunk and tells rank 1 to go on or stop, so
both pods leave at the same chunk, and the run stops where the one-rank run stopped, with the
same verdict, interval and scores.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import Cluster, OperatorDeployment, evaluation_manifest, give_to_runner
from tests.e2e.helpers import hf_spec

pytestmark = pytest.mark.e2e

LIMIT = 320
"""arc_easy documents per run: five chunks of 64 (the smallest chunk), so a stop saves at least one."""
GATE = {"sequential": True, "maxDrop": 0.05}
TWO_RANKS = {"resources": {"nodes": 2, "gpusPerNode": 0}}


def _spec(**overrides: Any) -> dict[str, Any]:
    return hf_spec(**{"tasks": ["arc_easy"], "limit": LIMIT, **overrides})


def _regressed(evaluation: dict[str, Any]) -> tuple[str, str]:
    (condition,) = [c for c in evaluation["status"]["conditions"] if c["type"] == "Regressed"]
    return condition["status"], condition["reason"]


def _stop(evaluation: dict[str, Any]) -> dict[str, Any]:
    (stop,) = evaluation["status"]["comparison"]["sequential"]["tasks"]
    assert stop["task"] == "arc_easy" and stop["total"] == LIMIT
    return dict(stop)


def _scores(cluster: Cluster, evaluation: str) -> list[dict[str, Any]]:
    (path,) = (cluster.output_dir / evaluation).rglob("scores_arc_easy_*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def _same_stop_on_two_ranks(cluster: Cluster, one: dict[str, Any], two: dict[str, Any]) -> None:
    """`two`, the two-rank run of `one`'s spec, stopped at the same chunk with the same verdict."""
    name = two["metadata"]["name"]
    status, reference = two["status"], one["status"]
    assert status["comparison"]["sequential"] == reference["comparison"]["sequential"], name
    assert _regressed(two) == _regressed(one)
    for key in ("verdict", "rows"):
        assert status["comparison"][key] == reference["comparison"][key], key
    assert status["nSamples"] == reference["nSamples"] and status["results"] == reference["results"]
    assert status["savedWork"]["documents"] == reference["savedWork"]["documents"]
    assert _scores(cluster, name) == _scores(cluster, one["metadata"]["name"]), "the same documents, scored alike"
    job = cluster.job_name(name)
    pods = cluster.items("pods", f"assay.dev/job={job}")
    assert len(pods) == 2 and {p["status"]["phase"] for p in pods} == {"Succeeded"}, name
    logs = "\n".join(cluster.pod_logs(p["metadata"]["name"], "runner") for p in pods)
    assert "rank 0 of 2: evaluating" in logs and "rank 1 of 2: evaluating" in logs


def _documents_saved(operator: OperatorDeployment, namespace: str) -> dict[str, float]:
    return {
        sample.labels["evaluation"]: sample.value
        for family in text_string_to_metric_families(operator.metrics())
        for sample in family.samples
        if sample.name == "assay_evaluation_documents_saved" and sample.labels.get("namespace") == namespace
    }


def test_a_sequential_gate_stops_early_regressed_and_not(cluster: Cluster, operator: OperatorDeployment) -> None:
    cluster.apply(evaluation_manifest("seq-base", **_spec()))
    cluster.wait("seq-base", "Succeeded", timeout=300)
    source, target = cluster.output_dir / "seq-base" / "g1", cluster.output_dir / "perfect"
    shutil.copytree(source, target)
    (scores,) = target.rglob("scores_arc_easy_*.jsonl")
    lines = [json.loads(line) for line in scores.read_text().splitlines()]
    assert len(lines) == LIMIT
    scores.write_text("".join(json.dumps({**line, "acc": 1, "acc_norm": 1}) + "\n" for line in lines))
    give_to_runner(target)

    candidates = {"seq-worse": {"path": "perfect"}, "seq-self": {"evaluation": "seq-base"}}
    for name, baseline in candidates.items():
        cluster.apply(evaluation_manifest(name, **_spec(baseline=baseline, gate=GATE)))
        cluster.apply(evaluation_manifest(f"{name}-2r", **_spec(baseline=baseline, gate=GATE, **TWO_RANKS)))
    runs = {name: cluster.wait(name, "Succeeded", timeout=600) for name in candidates}
    two_ranks = {name: cluster.wait(f"{name}-2r", "Succeeded", timeout=600) for name in candidates}

    worse = runs["seq-worse"]
    stop = _stop(worse)
    assert stop["stopped"] == "regressed" and stop["documents"] < LIMIT and stop["upper"] < -0.05, stop
    assert _regressed(worse) == ("True", "Regressed")
    assert worse["status"]["nSamples"]["arc_easy"]["effective"] == stop["documents"]
    assert worse["status"]["savedWork"]["documents"] == LIMIT - stop["documents"]
    assert all(row["n"] == stop["documents"] for row in worse["status"]["comparison"]["rows"])
    assert any("stopped early" in note for note in worse["status"]["comparison"]["notes"])

    same = runs["seq-self"]
    stop = _stop(same)
    assert stop["stopped"] == "non_inferior" and stop["documents"] < LIMIT and stop["lower"] >= -0.05, stop
    assert _regressed(same) == ("False", "NoRegression")
    cluster.kubectl_wait("seq-self", "Regressed=False")
    cluster.kubectl_wait("seq-worse", "Regressed=True")

    saved = cluster.wait_for(
        "assay_evaluation_documents_saved for both sequential runs",
        lambda: found if set(runs) <= set(found := _documents_saved(operator, cluster.namespace)) else None,
        timeout=60,
    )
    assert saved["seq-worse"] == worse["status"]["savedWork"]["documents"] > 0
    assert saved["seq-self"] == same["status"]["savedWork"]["documents"] > 0
    assert "seq-base" not in saved, "an ordinary run has no documents-saved series"

    for name, run in runs.items():
        _same_stop_on_two_ranks(cluster, run, two_ranks[name])
