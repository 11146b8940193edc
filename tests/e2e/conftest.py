"""Fixtures of the e2e suite: a real control plane, the operator as its own ServiceAccount, and
the FakeKubelet (a test stand-in for the kubelet) running runner pods as local processes.

Binaries: built once per machine by tests/e2e/cluster/build.sh. When they are not built yet
the suite builds them under CI=true or ASSAY_E2E_BUILD=1 (about 7 minutes cold on 2 cores) and
otherwise skips, saying how to build them; it skips as well when the Go toolchain or the
module proxy is unavailable for the build. Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from tests.e2e.cluster import control_plane as cp
from tests.e2e.cluster.node_agent import FakeKubelet

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "assay"
OPERATOR_NAMESPACE = "assay-system"
RELEASE = "assay"
GROUP_RESOURCE = "evaluations.assay.dev"
FORBIDDEN = re.compile(r'" 403 |Forbidden|forbidden')


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


def _find_helm() -> str:
    for candidate in (shutil.which("helm"), Path.home() / ".cache/assay/bin/helm", Path.home() / "go/bin/helm"):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    pytest.fail("helm not found (PATH, ~/.cache/assay/bin/helm, ~/go/bin/helm): install it with "
                "`go install helm.sh/helm/v3/cmd/helm@v3.16.4`")  # fmt: skip


# --- the control plane -----------------------------------------------------------------


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cp.ControlPlane]:
    if shutil.which("kubectl") is None:
        pytest.fail("kubectl is not on PATH; the e2e suite drives the cluster with it")
    built = (cp.cache_dir() / cp.k8s_version() / "bin" / ".complete").is_file()
    may_build = os.environ.get("CI", "").lower() == "true" or os.environ.get("ASSAY_E2E_BUILD") == "1"
    if not built and not may_build:
        pytest.skip(f"Kubernetes {cp.k8s_version()} binaries are not built yet: run tests/e2e/cluster/build.sh "
                    "once (or set ASSAY_E2E_BUILD=1)")  # fmt: skip
    try:
        bin_dir = cp.ensure_binaries()
    except cp.ClusterUnavailable as reason:
        pytest.skip(str(reason))
    plane = cp.ControlPlane(tmp_path_factory.mktemp("k8s"), bin_dir=bin_dir)
    plane.start()
    yield plane
    plane.stop()


def api_client(kubeconfig: Path) -> Any:
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    return client.ApiClient(configuration)


@pytest.fixture(scope="session")
def admin_api(control_plane: cp.ControlPlane) -> Any:
    return api_client(control_plane.admin_kubeconfig)


# --- the operator --------------------------------------------------------------------


class OperatorProcess:
    """`assay operator` as a subprocess, authenticated as the chart's ServiceAccount."""

    def __init__(self, *, kubeconfig: Path, workdir: Path, scope: tuple[str, ...] = ("--all-namespaces",)) -> None:
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.scope = scope
        self.metrics_port = cp.free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def log(self) -> Path:
        return self.workdir / f"operator-{self.starts}.log"

    def start(self, timeout: float = 60) -> None:
        self.starts += 1
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_SERVICE_")}
        env.update(KUBECONFIG=str(self.kubeconfig), PYTHONUNBUFFERED="1")
        handle = open(self.log, "wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "assay", "operator", "--standalone", *self.scope,
             f"--metrics-port={self.metrics_port}", "--health-port=0", "--verbose"],
            env=env, cwd=self.workdir, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=cp.die_with_parent,
        )  # fmt: skip
        handle.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the operator exited ({self.process.returncode}):\n{self.tail()}")
            text = self.log.read_text(errors="replace")
            if all(f"Starting the watch-stream for {r}" in text for r in ("evaluations", "jobs")):
                return
            time.sleep(0.2)
        raise AssertionError(f"the operator did not start watching Evaluations:\n{self.tail()}")

    def kill(self) -> None:
        """SIGKILL: no cleanup, as when a node dies or the pod is OOM-killed."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_since(self, mark: tuple[int, int]) -> str:
        """The log written since `mark` (from `log_mark`), across restarts."""
        starts, offset = mark
        text = ""
        for start in range(starts, self.starts + 1):
            path = self.workdir / f"operator-{start}.log"
            if path.exists():
                data = path.read_text(errors="replace")
                text += data[offset:] if start == starts else data
        return text

    def log_mark(self) -> tuple[int, int]:
        return self.starts, self.log.stat().st_size if self.log.exists() else 0

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as response:
            return response.read().decode()

    def tail(self, lines: int = 60) -> str:
        text = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        return "\n".join(text[-lines:])


def render_chart(*values: str, release: str = RELEASE) -> list[dict[str, Any]]:
    """`helm template` of the chart: the documents an install would apply."""
    rendered = subprocess.run(
        [_find_helm(), "template", release, str(CHART), "--namespace", OPERATOR_NAMESPACE, "--include-crds",
         *[arg for value in values for arg in ("--set", value)]],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return [d for d in yaml.safe_load_all(rendered) if d]


RBAC_KINDS = {"CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


def service_account_kubeconfig(plane: cp.ControlPlane, account: str, path: Path, namespace: str = OPERATOR_NAMESPACE) -> Path:
    """A kubeconfig with a real TokenRequest token of `namespace/account`."""
    token = plane.kubectl("create", "token", account, "-n", namespace, "--duration=4h").stdout.strip()
    return cp.write_kubeconfig(path, cp.kubeconfig(server=plane.server, ca_file=plane.ca_file, token=token,
                                                   user=f"system:serviceaccount:{namespace}:{account}"))  # fmt: skip


@pytest.fixture(scope="session")
def installed_chart(control_plane: cp.ControlPlane) -> dict[str, Any]:
    """CRD, the operator's ServiceAccount and its RBAC, rendered by `helm template` from the chart."""
    docs = [d for d in render_chart() if d.get("kind") in RBAC_KINDS]
    kinds = {d["kind"] for d in docs}
    assert {"CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"} <= kinds, kinds
    control_plane.kubectl("create", "namespace", OPERATOR_NAMESPACE)
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    control_plane.kubectl("wait", "--for=condition=Established", f"crd/{GROUP_RESOURCE}", "--timeout=60s")
    account = next(d for d in docs if d["kind"] == "ServiceAccount")["metadata"]["name"]
    return {"service_account": account, "docs": docs}


@pytest.fixture(scope="session")
def operator(control_plane: cp.ControlPlane, installed_chart: dict[str, Any],
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:  # fmt: skip
    workdir = tmp_path_factory.mktemp("operator")
    kubeconfig = service_account_kubeconfig(control_plane, installed_chart["service_account"],
                                            workdir / "operator.kubeconfig")  # fmt: skip
    process = OperatorProcess(kubeconfig=kubeconfig, workdir=workdir)
    process.start()
    yield process
    process.stop()


# --- the node agent and what runner pods need ------------------------------------------


@pytest.fixture(scope="session")
def datasets_dir(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from assay.runner.data.importer import import_benchmarks

    out = tmp_path_factory.mktemp("datasets")
    import_benchmarks(shared_data, out, only=["arc", "lambada"])
    return out


@pytest.fixture(scope="session")
def tiny_model(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.model_fixtures import tiny_gpt2

    return tiny_gpt2(tmp_path_factory.mktemp("models") / "tiny-gpt2", shared_data / "gpt2_tokenizer")


@pytest.fixture(scope="session")
def local_results(tiny_model: Path, datasets_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A local `assay run` of the evaluation `helpers.hf_spec` describes: the reference scores."""
    from tests.e2e.helpers import local_assay_run

    return local_assay_run(tiny_model, tmp_path_factory.mktemp("local-run"), datasets_dir=datasets_dir)


def image_environment(datasets_dir: Path) -> dict[str, str]:
    """What the runner image would set: PATH with this Python first, the offline datasets."""
    return {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
        "ASSAY_DATASETS_DIR": str(datasets_dir),
        "LANG": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }


@pytest.fixture(scope="session")
def kubelet(control_plane: cp.ControlPlane, admin_api: Any, datasets_dir: Path,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeKubelet]:  # fmt: skip
    agent = FakeKubelet(api_client=admin_api, server=control_plane.server, ca_file=control_plane.ca_file,
                        workdir=tmp_path_factory.mktemp("kubelet"), image_env=image_environment(datasets_dir))  # fmt: skip
    agent.start()
    yield agent
    agent.stop()


# --- per test ------------------------------------------------------------------------


class Cluster:
    """The helpers a test uses: kubectl as admin, Evaluations, Jobs, diagnostics."""

    def __init__(self, plane: cp.ControlPlane, operator: OperatorProcess, kubelet: FakeKubelet, namespace: str) -> None:
        self.plane = plane
        self.operator = operator
        self.kubelet = kubelet
        self.namespace = namespace

    def kubectl(self, *args: str, check: bool = True, input: str | None = None,
                kubeconfig: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:  # fmt: skip
        return self.plane.kubectl("-n", self.namespace, *args, check=check, input=input, kubeconfig=kubeconfig,
                                  timeout=timeout)  # fmt: skip

    def apply(self, manifest: dict[str, Any], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest), check=check)

    def get(self, kind: str, name: str) -> dict[str, Any]:
        return json.loads(self.kubectl("get", kind, name, "-o", "json").stdout)

    def items(self, kind: str, selector: str | None = None) -> list[dict[str, Any]]:
        args = ["get", kind, "-o", "json"] + (["-l", selector] if selector else [])
        return json.loads(self.kubectl(*args).stdout)["items"]

    def evaluation(self, name: str) -> dict[str, Any]:
        return self.get("evaluation", name)

    def wait(self, name: str, condition: str, timeout: int = 180) -> dict[str, Any]:
        """Until the Evaluation's `condition` is True; fails at once if it ends in the other outcome."""
        other = {"Succeeded": "Failed", "Failed": "Succeeded"}.get(condition)

        def reached() -> dict[str, Any] | None:
            evaluation = self.evaluation(name)
            conditions = {c["type"]: c["status"] for c in (evaluation.get("status") or {}).get("conditions") or ()}
            if other and conditions.get(other) == "True":
                raise AssertionError(f"evaluation/{name} became {other}, not {condition}\n{self.diagnostics()}")
            return evaluation if conditions.get(condition) == "True" else None

        return self.wait_for(f"evaluation/{name} to be {condition}", reached, timeout=timeout, interval=1.0)

    def kubectl_wait(self, name: str, condition: str, timeout: int = 60) -> None:
        result = self.kubectl("wait", f"--for=condition={condition}", f"evaluation/{name}", f"--timeout={timeout}s",
                              check=False, timeout=timeout + 30)  # fmt: skip
        assert result.returncode == 0, f"kubectl wait: {result.stderr}\n{self.diagnostics()}"

    def wait_for(self, what: str, predicate: Any, timeout: float = 120, interval: float = 0.5) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(interval)
        raise AssertionError(f"timed out waiting for {what}\n{self.diagnostics()}")

    def events(self, name: str) -> dict[str, str]:
        """reason → message of the Events about one Evaluation."""
        items = self.items("events")
        return {e["reason"]: e.get("message", "") for e in items if e["involvedObject"].get("name") == name
                and e["involvedObject"].get("kind") == "Evaluation"}

    def diagnostics(self) -> str:
        parts = [f"--- operator log (tail)\n{self.operator.tail(40)}"]
        for kind in ("evaluations", "jobs", "pods"):
            parts.append(f"--- {kind}\n{self.kubectl('get', kind, '-o', 'wide', check=False).stdout}")
        for evaluation in json.loads(self.kubectl("get", "evaluations", "-o", "json", check=False).stdout or "{}").get("items", []):
            parts.append(f"--- status of {evaluation['metadata']['name']}\n{json.dumps(evaluation.get('status'), indent=1)[:3000]}")
        for run in self.kubelet.runs_in(self.namespace):
            for name in sorted(p.stem for p in run.directory.glob("*.log")):
                parts.append(f"--- pod {run.name} container {name} (exit {run.exit_codes.get(name)})\n{run.log(name)[-3000:]}")
        return "\n".join(parts)


@pytest.fixture
def cluster(request: pytest.FixtureRequest, control_plane: cp.ControlPlane, operator: OperatorProcess,
            kubelet: FakeKubelet) -> Iterator[Cluster]:  # fmt: skip
    short = re.sub(r"[^a-z0-9]+", "-", request.node.name.removeprefix("test_").lower())[:20].strip("-")
    namespace = f"e2e-{short}-{uuid.uuid4().hex[:5]}"
    control_plane.kubectl("create", "namespace", namespace)
    ours = Cluster(control_plane, operator, kubelet, namespace)
    mark = operator.log_mark()
    yield ours
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(f"\n===== diagnostics of {namespace}\n{ours.diagnostics()}")
    control_plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    # The operator runs with the chart's RBAC: a permission it lacks is a failure even
    # where the test's own assertions would not notice it.
    denied = [line for line in operator.log_since(mark).splitlines() if FORBIDDEN.search(line)]
    assert not denied, "the operator was denied by RBAC:\n" + "\n".join(denied[:10])


def evaluation_manifest(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "assay.dev/v1alpha1", "kind": "Evaluation", "metadata": {"name": name}, "spec": spec}
