"""Fixtures of the e2e suite: a real control plane and a real node on this machine, the
project's images built from its Dockerfiles, and the operator installed by `helm install`
as the chart's Deployment.

- Binaries (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, CoreDNS,
  Prometheus, Kueue) are built once per machine by tests/e2e/cluster/build.sh; under CI=true or
  ASSAY_E2E_BUILD=1 the suite builds them itself, otherwise it skips saying how.
- The node (containerd + runc + CNI bridge, kubelet, scheduler, CoreDNS) needs root and the
  Debian packages that .ci/run installs: outside CI a missing piece skips the suite with the
  reason, under CI=true it fails it.
- Images: deploy/images on a Debian base made with debootstrap (no registry is reachable),
  imported into containerd; pods use them with IfNotPresent.
- The model and the offline datasets reach runner pods the way they would in a cluster: on
  a local PersistentVolume (the `cache` claim of every test namespace); results land on
  another (`output`).
"""

from __future__ import annotations

import calendar
import fcntl
import json
import os
import re
import shutil
import ssl
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from assay.operator.build import builders, runner_identity
from tests.e2e.cluster import control_plane as cp
from tests.e2e.cluster import images as image_builds
from tests.e2e.cluster import kueue as kueue_cluster
from tests.e2e.cluster import network
from tests.e2e.cluster.node import Node, NodeUnavailable, check_prerequisites, clean_host, leftovers, state_dir

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "assay"
OPERATOR_NAMESPACE = "assay-system"
RELEASE = "assay"
GROUP_RESOURCE = "evaluations.assay.dev"
FORBIDDEN = re.compile(r'" 403 |Forbidden|forbidden')
RUNNER_UID = 1000
CACHE_MOUNT = "/cache"
MODEL_IN_POD = f"{CACHE_MOUNT}/models/tiny-gpt2"
DATASETS_IN_CACHE = "datasets"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def skip_or_fail(reason: str) -> None:
    """Outside CI a missing prerequisite skips the e2e suite; under CI=true it fails it."""
    if in_ci():
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


def find_helm() -> str:
    for candidate in (shutil.which("helm"), Path.home() / ".cache/assay/bin/helm", Path.home() / "go/bin/helm"):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    pytest.fail(
        "helm not found (PATH, ~/.cache/assay/bin/helm, ~/go/bin/helm): install it with "
        "`go install helm.sh/helm/v3/cmd/helm@v3.16.4`"
    )


def render_chart(*values: str, release: str = RELEASE) -> list[dict[str, Any]]:
    """`helm template` of the chart: the documents an install would apply."""
    rendered = subprocess.run(
        [
            find_helm(),
            "template",
            release,
            str(CHART),
            "--namespace",
            OPERATOR_NAMESPACE,
            "--include-crds",
            *[arg for value in values for arg in ("--set", value)],
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [d for d in yaml.safe_load_all(rendered) if d]


RBAC_KINDS = {"CustomResourceDefinition", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


# --- the control plane and the node ----------------------------------------------------


@pytest.fixture(scope="session")
def host() -> Iterator[Path]:
    """This machine made ready for a node (leftovers of a killed run cleaned); restored afterwards."""
    if shutil.which("kubectl") is None:
        skip_or_fail("kubectl is not on PATH; the e2e suite drives the cluster with it")
    try:
        check_prerequisites()
    except NodeUnavailable as reason:
        skip_or_fail(str(reason))
    root = state_dir()
    # One node per machine (one bridge, port 443): a second e2e run waits for the first.
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f"{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        Node.prepare_host(root)
        yield root
        clean_host(root)
        left = leftovers(root)
        assert not left, f"the e2e node left things behind: {', '.join(left)}"


@pytest.fixture(scope="session")
def control_plane(host: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[cp.ControlPlane]:
    built = (cp.cache_dir() / cp.k8s_version() / "bin" / ".complete").is_file()
    may_build = in_ci() or os.environ.get("ASSAY_E2E_BUILD") == "1"
    if not built and not may_build:
        pytest.skip(
            f"Kubernetes {cp.k8s_version()} binaries are not built yet: run tests/e2e/cluster/build.sh "
            "once (or set ASSAY_E2E_BUILD=1)"
        )
    try:
        bin_dir = cp.ensure_binaries()
    except cp.ClusterUnavailable as reason:
        skip_or_fail(str(reason))
    plane = cp.ControlPlane(
        tmp_path_factory.mktemp("k8s"),
        bin_dir=bin_dir,
        address=network.API_ADDRESS,
        port=443,
        service_range=network.SERVICE_SUBNET,
    )
    plane.start()
    yield plane
    plane.stop()


@pytest.fixture(scope="session")
def images(host: Path) -> dict[str, str]:
    """The operator and runner images built from deploy/images (target → tag), and the pause image.

    Under the host's lock: another checkout's e2e run builds the same tags from its own tree."""
    try:
        base = image_builds.ensure_base_image()
        tags = dict(image_builds.build_images(base))
        tags["pause"] = image_builds.ensure_pause_image()
    except image_builds.ImagesUnavailable as reason:
        skip_or_fail(str(reason))
    return tags


@pytest.fixture(scope="session")
def node(control_plane: cp.ControlPlane, images: dict[str, str]) -> Iterator[Node]:
    real = Node(control_plane, root=state_dir())
    real.start()
    try:
        image_builds.import_into_containerd(list(images.values()), address=str(real.socket))
        yield real
    finally:
        real.stop()


@pytest.fixture(scope="module")
def kueue(control_plane: cp.ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[kueue_cluster.Kueue]:
    """The real Kueue controller (CRDs, webhooks, manager) for the rest of one test module.

    Module-scoped: while it runs, its Job webhook sees every Job the module's tests create
    (it leaves those without a queue label alone), as in a cluster with Kueue installed."""
    if not kueue_cluster.built(control_plane.bin_dir):
        if not (in_ci() or os.environ.get("ASSAY_E2E_BUILD") == "1"):
            pytest.skip("Kueue is not built yet: run tests/e2e/cluster/build.sh once (or set ASSAY_E2E_BUILD=1)")
        try:
            cp.ensure_binaries(required=("kueue",))
        except cp.ClusterUnavailable as reason:
            skip_or_fail(str(reason))
    if shutil.which("unshare") is None:
        skip_or_fail("Kueue's manager runs under `unshare` (util-linux), which is not on PATH")
    real = kueue_cluster.Kueue(control_plane, workdir=tmp_path_factory.mktemp("kueue"), bin_dir=control_plane.bin_dir)
    real.start()
    yield real
    real.stop()
    left = real.leftovers()
    assert not left, f"Kueue left things on the cluster: {', '.join(left)}"


@pytest.fixture(scope="session")
def admin_api(control_plane: cp.ControlPlane) -> Any:
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=str(control_plane.admin_kubeconfig), client_configuration=configuration)
    return client.ApiClient(configuration)


# --- the operator, installed by helm ---------------------------------------------------


def helm(plane: cp.ControlPlane, *args: str, timeout: float = 360) -> subprocess.CompletedProcess[str]:
    """helm with the admin kubeconfig; a failure, or a helm still running after `timeout`
    seconds (longer than its own `--timeout=300s`, so that helm's own word comes first), is an
    AssertionError, which the fixtures answer with the cluster's diagnostics."""
    try:
        result = subprocess.run(
            [find_helm(), f"--kubeconfig={plane.admin_kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"helm {' '.join(args)} was still running after {timeout:.0f} s") from None
    if result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed: {result.stderr.strip()}")
    return result


def chart_values(images: dict[str, str], *extra: str) -> list[str]:
    """--set arguments that point the chart at the locally built images."""
    operator_repo, operator_tag = images["operator"].rsplit(":", 1)
    return [
        "--set",
        f"image.repository={operator_repo}",
        "--set",
        f"image.tag={operator_tag}",
        "--set",
        "image.pullPolicy=IfNotPresent",
        "--set",
        f"runnerImage={images['runner']}",
        "--set",
        "operator.logLevel=debug",
        *[a for value in extra for a in ("--set", value)],
    ]


class OperatorDeployment:
    """The chart's operator Deployment in one namespace: its pod, logs, metrics, restarts."""

    SELECTOR = "app.kubernetes.io/name=assay"

    def __init__(self, plane: cp.ControlPlane, *, namespace: str, release: str) -> None:
        self.plane = plane
        self.namespace = namespace
        self.release = release
        self.metrics_port = 9090
        self._reader: tuple[str, float] | None = None  # a metrics-reader token, and when it was made

    def kubectl(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.plane.kubectl("-n", self.namespace, *args, check=check, timeout=timeout)

    @property
    def deployment(self) -> str:
        # The chart's fullname: the release name when it contains "assay", else "<release>-assay".
        return f"deployment/{self.release}" if "assay" in self.release else f"deployment/{self.release}-assay"

    def pods(self) -> list[dict[str, Any]]:
        items = json.loads(
            self.kubectl("get", "pods", "-l", f"app.kubernetes.io/instance={self.release}", "-o", "json").stdout
        )["items"]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    def pod(self) -> dict[str, Any]:
        (pod,) = self.pods()
        return pod

    def wait_watching(self, timeout: float = 240) -> None:
        """Until one operator pod is Ready and has started its watch-streams."""
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            pods = self.pods()
            ready = [
                p
                for p in pods
                if any(
                    c["type"] == "Ready" and c["status"] == "True" for c in p.get("status", {}).get("conditions", [])
                )
            ]
            if len(pods) == 1 and ready:
                text = self.logs()
                if all(f"Starting the watch-stream for {r}" in text for r in ("evaluations", "jobs")):
                    return
            time.sleep(0.5)
        raise AssertionError(
            f"the operator did not start watching Evaluations:\n{text[-4000:]}\n"
            f"{self.kubectl('get', 'pods', '-o', 'wide', check=False).stdout}"
        )

    def logs(self, since: str | None = None) -> str:
        pods = self.pods()
        if not pods:
            return ""
        args = ["logs", pods[0]["metadata"]["name"]] + ([f"--since-time={since}"] if since else [])
        return self.kubectl(*args, check=False).stdout

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.logs().splitlines()[-lines:])

    def kill(self) -> None:
        """No operator at all, as when its node dies: scale to zero and kill the pod without grace."""
        self.kubectl("scale", self.deployment, "--replicas=0")
        for pod in self.pods():
            self.kubectl("delete", "pod", pod["metadata"]["name"], "--grace-period=0", "--force", check=False)
        deadline = time.monotonic() + 60
        while self.pods() and time.monotonic() < deadline:
            time.sleep(0.5)

    def start(self) -> None:
        self.kubectl("scale", self.deployment, "--replicas=1")
        self.wait_watching()

    def diagnostics(self) -> str:
        """Why the operator is not up: its pods, their Events, and the logs of this and the last start."""
        parts = [
            self.kubectl("get", "pods", "-o", "wide", check=False).stdout,
            self.kubectl("describe", "pods", check=False).stdout[-4000:],
        ]
        for pod in self.pods():
            for previous in ("", "--previous"):
                args = ["logs", pod["metadata"]["name"]] + ([previous] if previous else [])
                parts.append(f"--- logs {previous}\n" + self.kubectl(*args, check=False).stdout[-3000:])
        return "\n".join(parts)

    def metrics(self) -> str:
        """/metrics of the operator pod, read as a scraper with the chart's metrics-reader role."""
        if self._reader is None or time.monotonic() - self._reader[1] > 1800:  # tokens last 2 h
            self._reader = (
                metrics_reader_token(self.plane, release=self.release, namespace=self.namespace),
                time.monotonic(),
            )
        request = urllib.request.Request(
            f"https://{self.pod()['status']['podIP']}:{self.metrics_port}/metrics",
            headers={"Authorization": f"Bearer {self._reader[0]}"},
        )
        with urllib.request.urlopen(request, timeout=5, context=self_signed_ok()) as response:
            return str(response.read().decode())


METRICS_READER = "e2e-metrics-reader"


def self_signed_ok() -> ssl.SSLContext:
    """A TLS client context that accepts the operator's self-signed /metrics certificate (the
    chart's default, as its ServiceMonitor's insecureSkipVerify does): encrypted, not checked."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    return context


def metrics_reader_token(plane: cp.ControlPlane, *, release: str = RELEASE, namespace: str = OPERATOR_NAMESPACE) -> str:
    """A real token of a service account bound to the chart's `<fullname>-metrics-reader` ClusterRole:
    what a Prometheus presents (its own account's token) to the operator's secured /metrics."""
    fullname = release if "assay" in release else f"{release}-assay"
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"{fullname}-{METRICS_READER}"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": f"{fullname}-metrics-reader",
        },
        "subjects": [{"kind": "ServiceAccount", "name": METRICS_READER, "namespace": namespace}],
    }
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": METRICS_READER, "namespace": namespace},
    }
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([account, binding]))
    return plane.kubectl("create", "token", METRICS_READER, "-n", namespace, "--duration=2h").stdout.strip()


@pytest.fixture(scope="session")
def operator(control_plane: cp.ControlPlane, node: Node, images: dict[str, str]) -> Iterator[OperatorDeployment]:
    deployment = OperatorDeployment(control_plane, namespace=OPERATOR_NAMESPACE, release=RELEASE)
    restricted_namespace(control_plane, OPERATOR_NAMESPACE)
    try:
        helm(
            control_plane,
            "install",
            RELEASE,
            str(CHART),
            "--namespace",
            OPERATOR_NAMESPACE,
            "--create-namespace",
            *chart_values(images),
            "--wait",
            "--timeout=300s",
        )
        deployment.wait_watching()
    except AssertionError as error:
        raise AssertionError(f"{error}\n{deployment.diagnostics()}") from None
    yield deployment
    helm(control_plane, "uninstall", RELEASE, "--namespace", OPERATOR_NAMESPACE, "--wait", "--timeout=120s")


def restricted_namespace(plane: cp.ControlPlane, namespace: str) -> None:
    """A namespace whose pods must meet Pod Security `restricted`, as a hardened cluster's do:
    the operator and every runner pod the suite starts are admitted under it."""
    manifest = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": namespace,
            "labels": {
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/enforce-version": "latest",
            },
        },
    }
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))


def service_account_kubeconfig(
    plane: cp.ControlPlane, account: str, path: Path, namespace: str = OPERATOR_NAMESPACE
) -> Path:
    """A kubeconfig with a real TokenRequest token of `namespace/account`."""
    token = plane.kubectl("create", "token", account, "-n", namespace, "--duration=4h").stdout.strip()
    return cp.write_kubeconfig(
        path,
        cp.kubeconfig(
            server=plane.server, ca_file=plane.ca_file, token=token, user=f"system:serviceaccount:{namespace}:{account}"
        ),
    )


# --- the model and data the runner pods read -------------------------------------------


@pytest.fixture(scope="session")
def volumes(host: Path) -> Path:
    """Host folders behind the local PersistentVolumes; the runner (uid 1000) owns them."""
    root = host / "volumes"
    (root / "cache").mkdir(parents=True, exist_ok=True)
    (root / "output").mkdir(parents=True, exist_ok=True)
    return root


def give_to_runner(path: Path) -> None:
    for current, dirs, files in os.walk(path):
        for name in [current, *(os.path.join(current, f) for f in dirs + files)]:
            os.chown(name, RUNNER_UID, RUNNER_UID)


@pytest.fixture(scope="session")
def datasets_dir(shared_data: Path, volumes: Path) -> Path:
    from assay.runner.data.importer import import_benchmarks

    out = volumes / "cache" / DATASETS_IN_CACHE
    import_benchmarks(shared_data, out, only=["arc", "lambada"])
    return out


@pytest.fixture(scope="session")
def tiny_model(shared_data: Path, volumes: Path, datasets_dir: Path) -> Path:
    """The tiny GPT-2 on the cache volume (host path); pods see it at MODEL_IN_POD."""
    from tests.model_fixtures import tiny_gpt2

    model = tiny_gpt2(volumes / "cache" / "models" / "tiny-gpt2", shared_data / "gpt2_tokenizer")
    give_to_runner(volumes / "cache")
    return model


@pytest.fixture(scope="session")
def second_model(volumes: Path, shared_data: Path, tiny_model: Path) -> Path:
    """Another tiny GPT-2 (other weights) beside the first on the cache volume; pods see it at SECOND_MODEL_IN_POD."""
    from tests.model_fixtures import tiny_gpt2

    model = tiny_gpt2(volumes / "cache" / "models" / "tiny-gpt2-b", shared_data / "gpt2_tokenizer", seed=4321)
    give_to_runner(volumes / "cache")
    return model


@pytest.fixture(scope="session")
def local_results(tiny_model: Path, datasets_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A local `assay run` of the evaluation `helpers.hf_spec` describes: the reference scores."""
    from tests.e2e.helpers import local_assay_run

    return local_assay_run(tiny_model, tmp_path_factory.mktemp("local-run"), datasets_dir=datasets_dir)


# --- per test ------------------------------------------------------------------------


class Cluster:
    """The helpers a test uses: kubectl as admin, Evaluations, Jobs, pods, diagnostics."""

    def __init__(
        self, plane: cp.ControlPlane, operator: OperatorDeployment, node: Node, namespace: str, volumes: Path
    ) -> None:
        self.plane = plane
        self.operator = operator
        self.node = node
        self.namespace = namespace
        self.output_dir = volumes / "output" / namespace
        self.cache_dir = volumes / "cache"

    def kubectl(
        self,
        *args: str,
        check: bool = True,
        input: str | None = None,
        kubeconfig: Path | None = None,
        timeout: float = 300,
    ) -> subprocess.CompletedProcess[str]:
        return self.plane.kubectl(
            "-n", self.namespace, *args, check=check, input=input, kubeconfig=kubeconfig, timeout=timeout
        )

    def apply(self, manifest: dict[str, Any], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest), check=check)

    def get(self, kind: str, name: str) -> dict[str, Any]:
        return dict(json.loads(self.kubectl("get", kind, name, "-o", "json").stdout))

    def items(self, kind: str, selector: str | None = None) -> list[dict[str, Any]]:
        args = ["get", kind, "-o", "json"] + (["-l", selector] if selector else [])
        return list(json.loads(self.kubectl(*args).stdout)["items"])

    def evaluation(self, name: str) -> dict[str, Any]:
        return self.get("evaluation", name)

    def _ref(self, evaluation: str, generation: int) -> builders.EvaluationRef:
        uid = self.evaluation(evaluation)["metadata"]["uid"]
        return builders.EvaluationRef(name=evaluation, namespace=self.namespace, uid=uid, generation=generation)

    def job_name(self, evaluation: str, generation: int = 1) -> str:
        """The Job (and headless Service, and NetworkPolicy) the operator names for a run: its
        names end in a mark of the Evaluation's uid, known once the Evaluation exists."""
        return builders.job_name(self._ref(evaluation, generation))

    def runner_account(self, evaluation: str) -> str:
        """The runner's ServiceAccount, Role and RoleBinding: the namespace's, whatever the Evaluation."""
        return runner_identity.ACCOUNT

    def wait(self, name: str, condition: str, timeout: int = 180) -> dict[str, Any]:
        """Until the Evaluation's `condition` is True; fails at once if it ends in the other outcome."""
        other = {"Succeeded": "Failed", "Failed": "Succeeded"}.get(condition)

        def reached() -> dict[str, Any] | None:
            evaluation = self.evaluation(name)
            conditions = {c["type"]: c["status"] for c in (evaluation.get("status") or {}).get("conditions") or ()}
            if other and conditions.get(other) == "True":
                raise AssertionError(f"evaluation/{name} became {other}, not {condition}\n{self.diagnostics()}")
            return evaluation if conditions.get(condition) == "True" else None

        return dict(self.wait_for(f"evaluation/{name} to be {condition}", reached, timeout=timeout, interval=1.0))

    def kubectl_wait(self, name: str, condition: str, timeout: int = 60) -> None:
        result = self.kubectl(
            "wait",
            f"--for=condition={condition}",
            f"evaluation/{name}",
            f"--timeout={timeout}s",
            check=False,
            timeout=timeout + 30,
        )
        assert result.returncode == 0, f"kubectl wait: {result.stderr}\n{self.diagnostics()}"

    def wait_for(self, what: str, predicate: Any, timeout: float = 120, interval: float = 0.5) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(interval)
        raise AssertionError(f"timed out waiting for {what}\n{self.diagnostics()}")

    def events(self, name: str, kind: str = "Evaluation") -> dict[str, str]:
        """reason → message of the Events about one object."""
        items = self.items("events")
        return {
            e["reason"]: e.get("message", "")
            for e in items
            if e["involvedObject"].get("name") == name and e["involvedObject"].get("kind") == kind
        }

    def pod_logs(self, pod: str, container: str | None = None) -> str:
        args = ["logs", pod] + (["-c", container] if container else [])
        return self.kubectl(*args, check=False).stdout

    def runner_logs(self) -> str:
        return "\n".join(self.pod_logs(p["metadata"]["name"], "runner") for p in self.items("pods"))

    def diagnostics(self) -> str:
        evaluations = json.loads(self.kubectl("get", "evaluations", "-o", "json", check=False).stdout or "{}")
        # Each run's phase and reason first: a long report is often read by its head alone.
        verdicts = [
            f"{e['metadata']['name']}: {(e.get('status') or {}).get('phase')} "
            f"{(e.get('status') or {}).get('reason')}: {(e.get('status') or {}).get('message')}"
            for e in evaluations.get("items", [])
        ]
        parts = ["--- evaluations (phase reason: message)", *verdicts]
        parts.append(f"--- operator log (tail)\n{self.operator.tail(40)}")
        for kind in ("evaluations", "jobs", "pods", "events"):
            parts.append(f"--- {kind}\n{self.kubectl('get', kind, '-o', 'wide', check=False).stdout}")
        for evaluation in evaluations.get("items", []):
            parts.append(
                f"--- status of {evaluation['metadata']['name']}\n{json.dumps(evaluation.get('status'), indent=1)[:3000]}"
            )
        for pod in json.loads(self.kubectl("get", "pods", "-o", "json", check=False).stdout or "{}").get("items", []):
            for container in pod["spec"].get("initContainers", []) + pod["spec"]["containers"]:
                log = self.pod_logs(pod["metadata"]["name"], container["name"])
                parts.append(f"--- pod {pod['metadata']['name']} container {container['name']}\n{log[-3000:]}")
        errors = [line for line in self.node.logs()["kubelet"].splitlines() if line.startswith("E")]
        parts.append("--- kubelet errors (tail)\n" + "\n".join(errors[-15:]))
        return "\n".join(parts)


def _local_volume(name: str, path: Path, *, namespace: str, claim: str) -> dict[str, Any]:
    """A local PersistentVolume on the node, bound in advance to `namespace/claim`."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {"assay.dev/e2e": "true"}},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "e2e-local",
            "local": {"path": str(path)},
            "claimRef": {"namespace": namespace, "name": claim},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["127.0.0.1"]}
                            ]
                        }
                    ]
                }
            },
        },
    }


def _claim(name: str, volume: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "e2e-local",
            "volumeName": volume,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }


@pytest.fixture
def cluster(
    request: pytest.FixtureRequest,
    control_plane: cp.ControlPlane,
    operator: OperatorDeployment,
    node: Node,
    volumes: Path,
    tiny_model: Path,
) -> Iterator[Cluster]:
    short = re.sub(r"[^a-z0-9]+", "-", request.node.name.removeprefix("test_").lower())[:20].strip("-")
    namespace = f"e2e-{short}-{uuid.uuid4().hex[:5]}"
    restricted_namespace(control_plane, namespace)
    ours = Cluster(control_plane, operator, node, namespace, volumes)
    ours.output_dir.mkdir(parents=True)
    give_to_runner(ours.output_dir)
    for claim, path in (("cache", ours.cache_dir), ("output", ours.output_dir)):
        control_plane.kubectl(
            "apply",
            "-f",
            "-",
            input=yaml.safe_dump(_local_volume(f"{namespace}-{claim}", path, namespace=namespace, claim=claim)),
        )
        ours.apply(_claim(claim, f"{namespace}-{claim}"))
    # Bound before any pod asks for them: the scheduler parks a pod whose claims are unbound
    # and may not look at it again for minutes.
    ours.wait_for(
        "the claims to bind", lambda: {c["status"].get("phase") for c in ours.items("pvc")} == {"Bound"}, timeout=60
    )
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    yield ours
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(f"\n===== diagnostics of {namespace}\n{ours.diagnostics()}")
    control_plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    control_plane.kubectl("delete", "pv", f"{namespace}-cache", f"{namespace}-output", "--wait=false", check=False)
    # The operator runs with the chart's RBAC: a permission it lacks is a failure even
    # where the test's own assertions would not notice it.
    denied = [
        record
        for record in _log_records(operator.logs(since=since))
        if FORBIDDEN.search(record)
        and "NamespaceTerminating" not in record  # not RBAC: the namespace is going
        and "because it is being terminated" not in record  # the same, in the Status message's words
        and "exceeded quota" not in record  # not RBAC either: a ResourceQuota (test_refusals.py)
        and " is invalid: " not in record  # a 422's field error ("Forbidden: must not be specified ...")
        and not _while_rbac_settles(record, getattr(ours, "rbac_settling", None))
        and not _in_another_namespace_going(control_plane, record, mine=namespace)
    ]
    assert not denied, "the operator was denied by RBAC:\n" + "\n".join(denied[:10])


def _while_rbac_settles(record: str, window: tuple[float, float] | None) -> bool:
    """Whether a log record is stamped inside `window` (epoch seconds, set by a test that restarts
    the API server: until its authorizer has caught up it answers 403)."""
    if window is None:
        return False
    try:
        stamp = calendar.timegm(time.strptime(record[:19], "%Y-%m-%d %H:%M:%S"))
    except ValueError:
        return False
    return window[0] <= stamp <= window[1]


def _log_records(text: str) -> list[str]:
    """Log lines joined into records: a traceback or an HTTP body belongs to the line it follows."""
    records: list[str] = []
    for line in text.splitlines():
        if records and not re.match(r"\d{4}-\d\d-\d\d ", line):
            records[-1] += "\n" + line
        else:
            records.append(line)
    return records


def _in_another_namespace_going(plane: cp.ControlPlane, line: str, *, mine: str) -> bool:
    """A request line for an earlier test's namespace that is being deleted (or gone): the API
    server forbids creating in it, which is not a permission the operator lacks."""
    match = re.search(r"/namespaces/([a-z0-9-]+)/", line)
    if match is None or not match.group(1).startswith("e2e-") or match.group(1) == mine:
        return False
    got = plane.kubectl("get", "namespace", match.group(1), "-o", "jsonpath={.status.phase}", check=False)
    return got.returncode != 0 or got.stdout.strip() == "Terminating"


def evaluation_manifest(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "assay.dev/v1alpha1", "kind": "Evaluation", "metadata": {"name": name}, "spec": spec}
