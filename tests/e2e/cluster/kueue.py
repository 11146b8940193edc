"""Kueue (sigs.k8s.io/kueue) on the e2e cluster: its CRDs, its admission webhooks and its
controller manager, as its release installs them, with the manager a process on this host
instead of a Deployment.

`build.sh` builds `cmd/kueue` from the Go module proxy and copies the CRDs and the webhook
manifests that ship in the same module next to the binary (`bin/kueue`, `bin/kueue-manifests`).
`Kueue.start()` then, in a few seconds:

- applies the CRDs, with the conversion webhooks the release's CRD patches add (v1beta1 <-> v1beta2);
- starts the manager: the batch/job integration only, no leader election (one replica),
  its webhook, health and metrics ports free ports on 127.0.0.1;
- registers the webhooks Kueue serves for Jobs and for its own kinds, with failurePolicy
  Fail as shipped, at `https://127.0.0.1:<port>/...` (the API server runs on this host).

Certificates: Kueue's internal certificate management issues its serving certificate for
`<webhook service>.<namespace>.svc`, a name the API server reaches through a Service's
ClusterIP, which this cluster does not route (no kube-proxy). So it is off, as with
cert-manager installs, and the test gives Kueue a self-signed certificate for 127.0.0.1,
which is also the webhooks' caBundle.

Two paths are fixed in Kueue's binary: with internal certificates off, the metrics server
reads its certificate from /etc/kueue/metrics/certs, and the visibility server (an
aggregated API that lists pending workloads; nothing here reads it) keeps its own under
/visibility. The manager runs in a mount namespace of its own in which /etc is an overlay
holding the metrics certificate (the host's /etc is not written, and the overlay goes with
the process); the visibility server is off (feature gate VisibilityOnDemand).

Credentials: the admin kubeconfig (system:masters), not Kueue's ClusterRole: what is tested
is what Kueue does to Jobs and Workloads, and the operator's RBAC is tested elsewhere.

Webhooks left out: those of integrations that are not enabled (Pods, Deployments,
StatefulSets, Kubeflow, Ray, JobSet, ...). Kueue answers them with no-ops; registered with
failurePolicy Fail they would put every pod the session creates behind this process.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.cluster.control_plane import ClusterError, ControlPlane, _Process, free_port, spawn

MANIFESTS = "kueue-manifests"
GROUP = "kueue.x-k8s.io"
API_VERSION = f"{GROUP}/v1beta2"
QUEUE_LABEL = f"{GROUP}/queue-name"
WEBHOOK_GROUPS = {"batch", GROUP}
"""API groups whose webhooks are registered: Jobs (the one integration) and Kueue's own kinds."""
WEBHOOK_CONFIGURATION_PREFIX = "kueue-"
"""As in Kueue's release manifests (kustomize's namePrefix)."""
DELETION_ORDER = (
    "workloads",
    "localqueues",
    "clusterqueues",
    "resourceflavors",
    "cohorts",
    "admissionchecks",
    "workloadpriorityclasses",
    "topologies",
)
"""Kueue's kinds that carry its finalizers, those that hold quota first."""


def built(bin_dir: Path) -> bool:
    return (bin_dir / "kueue").is_file() and (bin_dir / MANIFESTS / "webhook" / "manifests.yaml").is_file()


def _openssl(cwd: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


class Kueue:
    """Kueue's CRDs, webhooks and manager on `plane`; `stop()` removes all of it again."""

    def __init__(self, plane: ControlPlane, *, workdir: Path, bin_dir: Path) -> None:
        self.plane = plane
        self.workdir = workdir
        self.bin_dir = bin_dir
        self.manifests = bin_dir / MANIFESTS
        self.certs = workdir / "serving-certs"
        self.webhook_port = free_port()
        self.health_port = free_port()
        self.metrics_port = free_port()
        self._process: _Process | None = None
        self._crds: list[str] = []
        self._webhook_configurations: list[tuple[str, str]] = []

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.webhook_port}"

    def start(self, *, timeout: float = 120) -> Kueue:
        deadline = time.monotonic() + timeout
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
            self._write_certificate()
            self._apply_crds()
            self._process = spawn("kueue", self._command(), workdir=self.workdir)
            self._wait_ready(deadline)
            self._register_webhooks()
        except BaseException:
            self.stop()
            raise
        return self

    # --- setup ---------------------------------------------------------------------------

    def _write_certificate(self) -> None:
        """A self-signed serving certificate for 127.0.0.1: the webhooks' and the metrics server's."""
        self.certs.mkdir(parents=True, exist_ok=True)
        _openssl(
            self.certs,
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "tls.key",
            "-out",
            "tls.crt",
            "-days",
            "2",
            "-subj",
            "/CN=kueue-webhook",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-addext",
            "extendedKeyUsage=serverAuth",
        )
        # What the overlay adds to /etc in the manager's mount namespace.
        metrics = self.workdir / "etc-overlay" / "upper" / "kueue" / "metrics" / "certs"
        metrics.mkdir(parents=True, exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            shutil.copy(self.certs / name, metrics / name)
        (self.workdir / "etc-overlay" / "work").mkdir(exist_ok=True)

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode((self.certs / "tls.crt").read_bytes()).decode()

    def _conversion_webhooks(self) -> set[str]:
        """The CRDs the release converts by webhook: the `webhook_in_*` patches its
        kustomization applies (not every CRD with two versions: ResourceFlavor's have no
        converter and stay with strategy None)."""
        crd_dir = self.manifests / "crd"
        patches = yaml.safe_load((crd_dir / "kustomization.yaml").read_text()).get("patches") or []
        return {
            yaml.safe_load((crd_dir / patch["path"]).read_text())["metadata"]["name"]
            for patch in patches
            if Path(patch["path"]).name.startswith("webhook_in_")
        }

    def _apply_crds(self) -> None:
        crds = [yaml.safe_load(path.read_text()) for path in sorted((self.manifests / "crd" / "bases").glob("*.yaml"))]
        converted = self._conversion_webhooks()
        for crd in crds:
            if crd["metadata"]["name"] in converted:
                crd["spec"]["conversion"] = {
                    "strategy": "Webhook",
                    "webhook": {
                        "clientConfig": {"url": f"{self.url}/convert", "caBundle": self.ca_bundle},
                        "conversionReviewVersions": ["v1"],
                    },
                }
        self._crds = [crd["metadata"]["name"] for crd in crds]
        # Server-side: the Workload CRD is too large for client-side apply's annotation.
        self.plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump_all(crds))
        self.plane.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{name}" for name in self._crds], timeout=90
        )

    def _config(self) -> dict[str, Any]:
        return {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": "kueue-system",
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "metrics": {"bindAddress": f"127.0.0.1:{self.metrics_port}"},
            "webhook": {"host": "127.0.0.1", "port": self.webhook_port, "certDir": str(self.certs)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "manageJobsWithoutQueueName": False,
            "integrations": {"frameworks": ["batch/job"]},
            "featureGates": {"VisibilityOnDemand": False},
        }

    def _command(self) -> list[str]:
        config = self.workdir / "kueue-config.yaml"
        config.write_text(yaml.safe_dump(self._config()))
        overlay = self.workdir / "etc-overlay"
        kueue = [
            str(self.bin_dir / "kueue"),
            f"--config={config}",
            f"--kubeconfig={self.plane.admin_kubeconfig}",
            "--zap-encoder=console",
        ]
        mount = 'mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc && shift 2 && exec "$@"'
        return [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            mount,
            "sh",
            str(overlay / "upper"),
            str(overlay / "work"),
            *kueue,
        ]

    def _wait_ready(self, deadline: float) -> None:
        """Until /readyz says ok: Kueue's check passes once its webhook server serves."""
        assert self._process is not None
        last = ""
        while time.monotonic() < deadline:
            if self._process.popen.poll() is not None:
                raise ClusterError(f"kueue exited ({self._process.popen.returncode}):\n{self._process.tail(40)}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2) as response:
                    if response.read().strip() == b"ok":
                        return
            except Exception as error:
                last = str(error)
            time.sleep(0.3)
        raise ClusterError(f"kueue not ready ({last}):\n{self._process.tail(40)}")

    def _register_webhooks(self) -> None:
        configurations = [
            d for d in yaml.safe_load_all((self.manifests / "webhook" / "manifests.yaml").read_text()) if d
        ]
        for configuration in configurations:
            configuration["metadata"]["name"] = WEBHOOK_CONFIGURATION_PREFIX + configuration["metadata"]["name"]
            kept = []
            for webhook in configuration["webhooks"]:
                groups = {group for rule in webhook["rules"] for group in rule["apiGroups"]}
                if groups <= WEBHOOK_GROUPS:
                    path = webhook["clientConfig"]["service"]["path"]
                    webhook["clientConfig"] = {"url": f"{self.url}{path}", "caBundle": self.ca_bundle}
                    kept.append(webhook)
            configuration["webhooks"] = kept
        self.plane.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump_all(configurations)
        )
        self._webhook_configurations = [(c["kind"], c["metadata"]["name"]) for c in configurations]

    # --- use ---------------------------------------------------------------------------

    def workloads(self, namespace: str) -> list[dict[str, Any]]:
        result = self.plane.kubectl("get", f"workloads.{GROUP}", "-n", namespace, "-o", "json")
        return list(json.loads(result.stdout)["items"])

    def tail(self, lines: int = 40) -> str:
        return self._process.tail(lines) if self._process is not None else ""

    # --- teardown ----------------------------------------------------------------------

    def leftovers(self) -> list[str]:
        """What of Kueue is still on the cluster (empty after `stop()`)."""
        crds = self.plane.kubectl("get", "crd", "-o", "name", check=False).stdout.split()
        found = [crd for crd in crds if crd.endswith(f".{GROUP}")]
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            names = self.plane.kubectl("get", kind, "-o", "name", check=False).stdout.split()
            found += [n for n in names if n.split("/", 1)[1].startswith(WEBHOOK_CONFIGURATION_PREFIX)]
        if self._process is not None:
            found.append(f"process {self._process.popen.pid}")
        return found

    def stop(self) -> None:
        """Kueue's objects (while Kueue still runs, to take its finalizers off them), its
        webhooks, the manager, then its CRDs: the cluster is as it was before `start()`."""
        kubectl = self.plane.kubectl
        if self._process is not None and self._process.popen.poll() is None:
            for kind in DELETION_ORDER:
                kubectl(
                    "delete",
                    f"{kind}.{GROUP}",
                    "--all",
                    "--all-namespaces",
                    "--wait=true",
                    "--timeout=60s",
                    check=False,
                    timeout=90,
                )
        for kind, name in self._webhook_configurations:
            kubectl("delete", kind, name, "--ignore-not-found", check=False)
        self._webhook_configurations = []
        if self._process is not None:
            self._process.stop()
            self._process = None
        # Whatever still carries a finalizer has no Kueue left to remove it.
        for kind in DELETION_ORDER:
            listed = kubectl("get", f"{kind}.{GROUP}", "--all-namespaces", "-o", "json", check=False)
            for item in json.loads(listed.stdout or '{"items": []}').get("items", []):
                meta = item["metadata"]
                namespace = ["-n", meta["namespace"]] if meta.get("namespace") else []
                kubectl(
                    "patch",
                    f"{kind}.{GROUP}",
                    meta["name"],
                    *namespace,
                    "--type=merge",
                    "-p",
                    '{"metadata": {"finalizers": null}}',
                    check=False,
                )
        if self._crds:
            kubectl(
                "delete",
                "crd",
                *self._crds,
                "--ignore-not-found",
                "--wait=true",
                "--timeout=60s",
                check=False,
                timeout=90,
            )
            self._crds = []
