"""A real Kubernetes control plane on this machine: etcd, kube-apiserver, kube-controller-manager.

The binaries are built from the Go module proxy by `build.sh` (once per machine, cached by
version under ~/.cache/assay/k8s/<version>/bin). `ControlPlane.start()` then brings them up
on free ports in a few seconds (the API server where pods reach it, see `network`) with what a real cluster has and the operator
relies on: RBAC authorization, service-account token signing (TokenRequest works), the
ServiceAccount admission plugin, and the controllers that matter here (Job, garbage
collector, namespace, service-account, root-CA publisher, persistent volumes). The kubelet,
scheduler and CoreDNS are `node.Node`'s.

Credentials: an admin token (static token file, group system:masters) for the tests, the
scheduler and CoreDNS; client certificates for the kubelet (system:node:<name>, checked by the
Node authorizer) and for the API server's calls to it; everything else (the operator, the
runner pods) uses ServiceAccount tokens minted through the TokenRequest API, so RBAC applies
to them exactly as in a cluster.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import yaml

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build.sh"
DEFAULT_VERSION = "v1.33.13"
BUILD_UNAVAILABLE_EXIT = 3
"""build.sh's exit status when the Go toolchain or the module proxy is unavailable."""


class ClusterUnavailable(Exception):
    """The binaries cannot be built here because Go or the module proxy is missing (skip)."""


class ClusterError(Exception):
    """Something that should have worked did not (fail)."""


def k8s_version() -> str:
    return os.environ.get("ASSAY_K8S_VERSION", DEFAULT_VERSION)


def cache_dir() -> Path:
    return Path(os.environ.get("ASSAY_K8S_CACHE", Path.home() / ".cache" / "assay" / "k8s"))


def ensure_binaries(*, log: Path | None = None, required: Sequence[str] = ()) -> Path:
    """The bin folder with everything build.sh builds; builds them if needed, or if one of
    `required` is missing (a cache completed before build.sh built it)."""
    bin_dir = cache_dir() / k8s_version() / "bin"
    if (bin_dir / ".complete").is_file() and all((bin_dir / name).exists() for name in required):
        return bin_dir
    if shutil.which("go") is None:
        raise ClusterUnavailable(
            f"no Go toolchain on PATH to build Kubernetes {k8s_version()} (run tests/e2e/cluster/build.sh "
            "on a machine with Go >= 1.24 and access to the Go module proxy)"
        )
    log = log or cache_dir() / f"build-{k8s_version()}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        result = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=out, stderr=subprocess.STDOUT, check=False)
    if result.returncode == BUILD_UNAVAILABLE_EXIT:
        raise ClusterUnavailable(f"the Go module proxy is unavailable to build Kubernetes {k8s_version()}; see {log}")
    if (
        result.returncode != 0
        or not (bin_dir / ".complete").is_file()
        or not all((bin_dir / name).exists() for name in required)
    ):
        raise ClusterError(f"building Kubernetes {k8s_version()} failed (exit {result.returncode}); see {log}")
    return bin_dir


def die_with_parent() -> None:
    """preexec_fn: SIGTERM this child when the test process dies, even by SIGKILL (Linux).

    The children run in their own sessions (so that a Ctrl-C reaches pytest alone), which
    would otherwise leave a control plane running after a killed test run.
    """
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- certificates -----------------------------------------------------------------------


def _write_pki(pki: Path, *, addresses: tuple[str, ...] = ("127.0.0.1",)) -> None:
    """A CA, the API server's serving cert (its addresses, localhost, kubernetes.default.svc), its
    client cert for kubelets (group system:masters) and the SA key.

    With the openssl CLI (Debian's ca-certificates depends on it), not a Python package.
    """
    pki.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=pki, check=True, capture_output=True)

    names = [
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ]
    san = ",".join([f"DNS:{n}" for n in names] + [f"IP:{a}" for a in dict.fromkeys(("127.0.0.1", *addresses))])
    (pki / "serving.ext").write_text(f"subjectAltName={san}\nextendedKeyUsage=serverAuth\n")
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "ca.key")
    openssl(
        "req",
        "-x509",
        "-new",
        "-key",
        "ca.key",
        "-subj",
        "/CN=assay-e2e-ca",
        "-days",
        "2",
        "-out",
        "ca.crt",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    )
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "apiserver.key")
    openssl("req", "-new", "-key", "apiserver.key", "-subj", "/CN=kube-apiserver", "-out", "apiserver.csr")
    openssl(
        "x509",
        "-req",
        "-in",
        "apiserver.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "serving.ext",
        "-out",
        "apiserver.crt",
    )
    (pki / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "kubelet-client.key")
    openssl(
        "req",
        "-new",
        "-key",
        "kubelet-client.key",
        "-subj",
        "/O=system:masters/CN=kube-apiserver-kubelet-client",
        "-out",
        "kubelet-client.csr",
    )
    openssl(
        "x509",
        "-req",
        "-in",
        "kubelet-client.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "client.ext",
        "-out",
        "kubelet-client.crt",
    )
    openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "sa.key")
    openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub")


def kubeconfig(
    *,
    server: str,
    ca_file: Path,
    token: str | None = None,
    token_file: Path | None = None,
    user: str = "user",
    namespace: str | None = None,
) -> dict[str, Any]:
    """A kubeconfig dict for one bearer token (inline or as a file that may be refreshed)."""
    credentials: dict[str, Any] = {"token": token} if token is not None else {"tokenFile": str(token_file)}
    context: dict[str, Any] = {"cluster": "assay-e2e", "user": user}
    if namespace:
        context["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "assay-e2e", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": "assay-e2e", "context": context}],
        "current-context": "assay-e2e",
    }


def write_kubeconfig(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


# --- processes --------------------------------------------------------------------------


@dataclasses.dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    handle: IO[bytes]

    def stop(self, timeout: float = 10.0) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout)
        self.handle.close()

    def tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])


def spawn(name: str, args: list[str], *, workdir: Path) -> _Process:
    """A long-running binary in its own session, logging to `workdir/<name>.log` (appended)."""
    log = workdir / f"{name}.log"
    handle = open(log, "ab")
    popen = subprocess.Popen(
        args,
        stdout=handle,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=workdir,
        start_new_session=True,
        preexec_fn=die_with_parent,
    )
    return _Process(name, popen, log, handle)


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager under `workdir`.

    By default the API server listens on a free loopback port. For a real node it listens
    where pods reach it: `address` is the `kubernetes` Service's ClusterIP (the first address
    of `service_range`, put on the test's bridge) and the port is 443, the Service's port.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        bin_dir: Path,
        address: str = "127.0.0.1",
        port: int | None = None,
        service_range: str = "10.0.0.0/24",
    ) -> None:
        self.workdir = workdir
        self.bin_dir = bin_dir
        self.pki = workdir / "pki"
        self.admin_token = secrets.token_hex(16)
        self.address = address
        self.api_port = port or free_port()
        self.service_range = service_range
        self.server = f"https://{address}:{self.api_port}"
        self.admin_kubeconfig = workdir / "admin.kubeconfig"
        self._processes: list[_Process] = []
        self._args: dict[str, list[str]] = {}

    @property
    def ca_file(self) -> Path:
        return self.pki / "ca.crt"

    def _spawn(self, name: str, args: list[str]) -> _Process:
        process = spawn(name, args, workdir=self.workdir)
        self._processes.append(process)
        self._args[name] = args
        return process

    def restart_apiserver(self, *, down_for: float = 0.0, timeout: float = 90.0) -> None:
        """Stop the API server (SIGTERM, as an upgrade or a crash-looping static pod does),
        keep it down `down_for` seconds, start it with the same flags, wait until it is ready."""
        (old,) = [p for p in self._processes if p.name == "kube-apiserver"]
        old.stop()
        self._processes.remove(old)
        time.sleep(down_for)
        deadline = time.monotonic() + timeout
        self._wait_http(
            self._spawn("kube-apiserver", self._args["kube-apiserver"]),
            f"{self.server}/readyz",
            deadline,
            ok=lambda body: body.strip() == b"ok",
            token=self.admin_token,
        )

    def start(self, *, timeout: float = 90.0) -> ControlPlane:
        self.workdir.mkdir(parents=True, exist_ok=True)
        _write_pki(self.pki, addresses=(self.address,))
        (self.workdir / "tokens.csv").write_text(
            f'{self.admin_token},assay-e2e-admin,assay-e2e-admin,"system:masters"\n'
        )
        write_kubeconfig(
            self.admin_kubeconfig,
            kubeconfig(server=self.server, ca_file=self.ca_file, token=self.admin_token, user="admin"),
        )
        deadline = time.monotonic() + timeout
        try:
            self._start_etcd(deadline)
            self._start_apiserver(deadline)
            self._start_controller_manager()
            self._wait_for_default_service_account(deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_etcd(self, deadline: float) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        etcd = self._spawn(
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                "--name=assay-e2e",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=assay-e2e=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
                "--quota-backend-bytes=2147483648",
            ],
        )
        self._wait_http(etcd, f"{self.etcd_url}/health", deadline, ok=lambda body: b'"health":"true"' in body)

    def _start_apiserver(self, deadline: float) -> None:
        pki = self.pki
        apiserver = self._spawn(
            "kube-apiserver",
            [
                str(self.bin_dir / "kube-apiserver"),
                f"--etcd-servers={self.etcd_url}",
                f"--bind-address={self.address}",
                f"--advertise-address={self.address}",
                f"--secure-port={self.api_port}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--token-auth-file={self.workdir / 'tokens.csv'}",
                "--authorization-mode=Node,RBAC",
                # Kubelets: the node authorizer and NodeRestriction (on by default) as in a cluster,
                # and the API server's own client cert for logs and exec.
                f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
                f"--kubelet-client-key={pki / 'kubelet-client.key'}",
                f"--kubelet-certificate-authority={pki / 'ca.crt'}",
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--service-cluster-ip-range={self.service_range}",
                "--allow-privileged=true",
                "--anonymous-auth=false",
                # Apiserver-local endpoints (no node), and no webhook or aggregation to reach.
                "--endpoint-reconciler-type=none",
                "--enable-priority-and-fairness=false",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                "--v=0",
            ],
        )
        self._wait_http(
            apiserver, f"{self.server}/readyz", deadline, ok=lambda body: body.strip() == b"ok", token=self.admin_token
        )

    def _start_controller_manager(self) -> None:
        self._spawn(
            "kube-controller-manager",
            [
                str(self.bin_dir / "kube-controller-manager"),
                f"--kubeconfig={self.admin_kubeconfig}",
                "--leader-elect=false",
                "--controllers=*",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                f"--service-account-private-key-file={self.pki / 'sa.key'}",
                f"--root-ca-file={self.ca_file}",
                "--use-service-account-credentials=false",
                "--concurrent-job-syncs=5",
                "--concurrent-gc-syncs=5",
                # The PV binder works on a timer (15 s by default), not on claim events: every
                # test's pre-bound claims waited ~10 s for it, ~12 minutes over the suite.
                "--pvclaimbinder-sync-period=1s",
                f"--cert-dir={self.workdir / 'kcm-certs'}",
                "--v=0",
            ],
        )

    def _wait_for_default_service_account(self, deadline: float) -> None:
        """The service-account controller runs: pods can be admitted in new namespaces."""
        kcm = self._processes[-1]
        while time.monotonic() < deadline:
            if kcm.popen.poll() is not None:
                raise ClusterError(f"kube-controller-manager exited ({kcm.popen.returncode}):\n{kcm.tail()}")
            if self.kubectl("get", "serviceaccount", "default", "-n", "default", check=False).returncode == 0:
                return
            time.sleep(0.3)
        raise ClusterError(f"the service-account controller never created default/default:\n{kcm.tail()}")

    def _wait_http(self, process: _Process, url: str, deadline: float, *, ok: Any, token: str | None = None) -> None:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        last = ""
        while time.monotonic() < deadline:
            if process.popen.poll() is not None:
                raise ClusterError(f"{process.name} exited ({process.popen.returncode}):\n{process.tail()}")
            request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
            try:
                with urllib.request.urlopen(
                    request, timeout=2, context=context if url.startswith("https") else None
                ) as r:
                    body = r.read()
                    if ok(body):
                        return
                    last = body.decode(errors="replace")
            except Exception as error:
                last = str(error)
            time.sleep(0.2)
        raise ClusterError(f"{process.name} not ready at {url} ({last}):\n{process.tail()}")

    def kubectl(
        self,
        *args: str,
        kubeconfig: Path | None = None,
        check: bool = True,
        input: str | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [
                "kubectl",
                f"--kubeconfig={kubeconfig or self.admin_kubeconfig}",
                f"--cache-dir={self.workdir / 'kubectl-cache'}",
                *args,
            ],
            capture_output=True,
            text=True,
            input=input,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
        return result

    def logs(self) -> dict[str, str]:
        return {p.name: p.tail(60) for p in self._processes}

    def stop(self) -> None:
        for process in reversed(self._processes):
            process.stop()
        self._processes.clear()
