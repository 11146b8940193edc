"""`assay get`, `results`, `logs` and `describe` against the real control plane: a dummy
Evaluation runs to the end, then each command runs as a user runs it (a subprocess, the
kubeconfig in $KUBECONFIG, the namespace from its context) and says what kubectl would
have had to dig out: the row of `kubectl get evals`, the scores the runner printed in its
log, that log itself, and the run's story with its Events. A missing Evaluation and a
service account without RBAC end in one sentence each.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.cli_runs import assay_cli
from tests.e2e.cluster import control_plane as cp
from tests.e2e.conftest import Cluster, evaluation_manifest, service_account_kubeconfig
from tests.e2e.helpers import dummy_spec

pytestmark = pytest.mark.e2e

NAME = "cli-dummy"


def _score_rows(text: str) -> list[tuple[str, ...]]:
    """(task, version, filter, metric, value, stderr) of every row of lm-eval's tables in `text`;
    n-shot and the ↑/↓ column left out (status does not keep them)."""
    rows, task, in_table = [], "", False
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split("|")[1:-1]] if line.startswith("|") else []
        if len(cells) != 9:
            in_table = False
            continue
        if cells[0] in ("Tasks", "Groups"):
            in_table = True
            continue
        if not in_table or (cells[1] and not cells[1].strip("-:")):  # the rule under the header
            continue
        task = cells[0] or task
        rows.append((task, cells[1], cells[2], cells[4], cells[6], cells[8]))
    return rows


def test_the_cluster_commands_read_a_finished_run(cluster: Cluster, tmp_path: Path) -> None:
    cluster.apply(evaluation_manifest(NAME, **dummy_spec()))
    evaluation = cluster.wait(NAME, "Succeeded", timeout=180)
    status = evaluation["status"]
    kubeconfig = cp.write_kubeconfig(
        tmp_path / "kubeconfig",
        cp.kubeconfig(
            server=cluster.plane.server,
            ca_file=cluster.plane.ca_file,
            token=cluster.plane.admin_token,
            user="admin",
            namespace=cluster.namespace,
        ),
    )

    got = assay_cli("get", kubeconfig=kubeconfig)
    assert got.returncode == 0, got.stderr
    header, row = got.stdout.splitlines()
    assert header.split() == ["NAME", "MODEL", "TASKS", "PHASE", "REASON", "PROGRESS", "REGRESSED", "AGE"]
    assert row.split()[:5] == [NAME, status["model"], "arc_easy", "Succeeded", "JobComplete"]
    assert status["progress"]["summary"] in row
    as_json = json.loads(assay_cli("get", NAME, "-o", "json", kubeconfig=kubeconfig).stdout)
    assert (
        as_json["metadata"]["uid"] == evaluation["metadata"]["uid"]
        and as_json["status"]["results"] == status["results"]
    )
    across = assay_cli("get", "-A", kubeconfig=kubeconfig).stdout.splitlines()
    assert across[0].split()[:2] == ["NAMESPACE", "NAME"] and any(
        line.split()[:2] == [cluster.namespace, NAME] for line in across
    )

    (pod,) = cluster.items("pods", f"assay.dev/job={status['jobName']}")
    runner_log = cluster.pod_logs(pod["metadata"]["name"], "runner")
    logs = assay_cli("logs", NAME, kubeconfig=kubeconfig)
    assert (logs.returncode, logs.stdout) == (0, runner_log), logs.stderr

    results = assay_cli("results", NAME, kubeconfig=kubeconfig)
    assert results.returncode == 0, results.stderr
    assert results.stdout.startswith(f"{cluster.namespace}/{NAME} ({status['model']}): Succeeded.")
    printed = _score_rows(results.stdout)
    assert printed and printed == _score_rows(runner_log)  # the scores the runner printed, cell for cell
    shown = json.loads(assay_cli("results", NAME, "--format", "json", kubeconfig=kubeconfig).stdout)
    assert set(shown["results"]) == {"arc_easy"} and shown["n-samples"]["arc_easy"] == status["nSamples"]["arc_easy"]
    assert {k: v["value"] for k, v in status["results"]["arc_easy"].items()} == {
        k: v for k, v in shown["results"]["arc_easy"].items() if "_stderr," not in k
    }

    described = assay_cli("describe", NAME, kubeconfig=kubeconfig)
    assert described.returncode == 0, described.stderr
    text = described.stdout
    assert "What happened: The run succeeded (JobComplete)." in text
    assert f"What to do: Nothing: the scores are in status; print them with `assay results {NAME}`." in text
    assert f"Job:       {status['jobName']}" in text and "Conditions:" in text
    assert "JobCreated" in text  # the operator's Event, among the recent ones


def test_a_missing_evaluation_and_a_forbidden_reader_are_one_sentence(cluster: Cluster, tmp_path: Path) -> None:
    admin = cp.write_kubeconfig(
        tmp_path / "admin",
        cp.kubeconfig(
            server=cluster.plane.server,
            ca_file=cluster.plane.ca_file,
            token=cluster.plane.admin_token,
            user="admin",
            namespace=cluster.namespace,
        ),
    )
    missing = assay_cli("describe", "no-such-run", kubeconfig=admin)
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr == f'assay: error: Evaluation "no-such-run" not found in namespace "{cluster.namespace}".\n'

    cluster.kubectl("create", "serviceaccount", "nobody")
    nobody = service_account_kubeconfig(cluster.plane, "nobody", tmp_path / "nobody", namespace=cluster.namespace)
    denied = assay_cli("get", "-n", cluster.namespace, kubeconfig=nobody)
    assert denied.returncode == 1 and denied.stdout == ""
    assert denied.stderr.startswith("assay: error: Forbidden: ") and denied.stderr.count("\n") == 1, denied.stderr
    assert 'cannot list resource "evaluations"' in denied.stderr
