"""A cluster for `assay get`, `results`, `logs` and `describe`: the local API server of the
operator's tests (real HTTP), reached through a kubeconfig file by the product's own client (assay.kube).

`ClusterCli.run` calls `assay.cli.main` in this process, so a test reads what a user reads:
stdout, stderr and the exit code.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from assay import cli
from tests.operator.local_apiserver import LocalApiServer

EVALUATIONS = "/apis/assay.dev/v1alpha1/namespaces/{namespace}/evaluations/{name}"
PODS = "/api/v1/namespaces/{namespace}/pods/{name}"
EVENTS = "/api/v1/namespaces/{namespace}/events/{name}"
CONTEXT_NAMESPACE = "team"


def stamp(ago: datetime.timedelta) -> str:
    """An API timestamp `ago` before now."""
    return (datetime.datetime.now(datetime.timezone.utc) - ago).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_kubeconfig(path: Path, *, server: str, namespace: str | None = CONTEXT_NAMESPACE) -> Path:
    context: dict[str, Any] = {"cluster": "local", "user": "tester", **({"namespace": namespace} if namespace else {})}
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "local",
                "clusters": [{"name": "local", "cluster": {"server": server}}],
                "users": [{"name": "tester", "user": {"token": "a-token"}}],
                "contexts": [{"name": "local", "context": context}],
            }
        )
    )
    return path


class ClusterCli:
    def __init__(self, server: LocalApiServer, kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.server, self.kubeconfig, self._capsys = server, kubeconfig, capsys

    def run(self, *argv: str) -> tuple[int, str, str]:
        self._capsys.readouterr()
        code = cli.main(list(argv))
        out, err = self._capsys.readouterr()
        return code, out, err

    def evaluation(
        self,
        name: str,
        *,
        namespace: str = CONTEXT_NAMESPACE,
        status: dict[str, Any] | None = None,
        spec: dict[str, Any] | None = None,
        labels: dict[str, str] | None = None,
        age: datetime.timedelta = datetime.timedelta(minutes=20),
    ) -> dict[str, Any]:
        obj = {
            "apiVersion": "assay.dev/v1alpha1",
            "kind": "Evaluation",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}, "creationTimestamp": stamp(age)},
            "spec": spec or {"model": "hf", "modelArgs": {"pretrained": "gpt2"}, "tasks": ["arc_easy"]},
            "status": status or {},
        }
        self.server.put(obj, EVALUATIONS.format(namespace=namespace, name=name))
        return obj

    def pod(
        self,
        name: str,
        *,
        job: str,
        rank: int | None = None,
        phase: str = "Succeeded",
        logs: dict[str, str] | None = None,
        age: datetime.timedelta = datetime.timedelta(minutes=4),
        namespace: str = CONTEXT_NAMESPACE,
        status: dict[str, Any] | None = None,
    ) -> None:
        annotations = {"batch.kubernetes.io/job-completion-index": str(rank)} if rank is not None else {}
        path = PODS.format(namespace=namespace, name=name)
        self.server.put(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": {"assay.dev/job": job},
                    "annotations": annotations,
                    "creationTimestamp": stamp(age),
                },
                "status": {"phase": phase, **(status or {})},
            },
            path,
        )
        for container, text in (logs or {}).items():
            self.server.logs[(path, container)] = text

    def event(
        self,
        name: str,
        *,
        kind: str,
        about: str,
        reason: str,
        message: str,
        type: str = "Normal",
        age: datetime.timedelta = datetime.timedelta(minutes=3),
        count: int = 1,
        namespace: str = CONTEXT_NAMESPACE,
    ) -> None:
        self.server.put(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": namespace},
                "involvedObject": {"kind": kind, "name": about, "namespace": namespace},
                "reason": reason,
                "message": message,
                "type": type,
                "count": count,
                "lastTimestamp": stamp(age),
            },
            EVENTS.format(namespace=namespace, name=name),
        )


@pytest.fixture
def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Iterator[ClusterCli]:
    server = LocalApiServer()
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server=f"http://127.0.0.1:{server.httpd.server_address[1]}")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    yield ClusterCli(server, kubeconfig, capsys)
    server.close()
