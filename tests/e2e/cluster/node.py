"""A real node on this machine: containerd (CRI) + runc + CNI, the kubelet, kube-scheduler and
CoreDNS, started and stopped by the e2e fixtures.

Everything lives under one state folder (`ASSAY_E2E_NODE_DIR`, default /var/tmp/assay-e2e-node)
so that a run that was killed can be cleaned at the next start: its processes are found by
that path in their command lines, its mounts by that prefix, its cgroups under `kubepods`.
containerd's content store (the images, several GB) is kept in ~/.cache/assay/node so that
unchanged images are not imported again.

What the kubelet changes on the host and `stop()` restores (measured, shared/REAL_NODE.md):
sysctls (kernel.panic, kernel.panic_on_oops, vm.overcommit_memory, and ip_forward, which
the bridge plugin sets), `kubepods` cgroups in every hierarchy, bind mounts under its root
dir, /var/lib/kubelet/device-plugins/kubelet.sock, symlinks in /var/log/containers.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import yaml

from tests.e2e.cluster import network
from tests.e2e.cluster.control_plane import ClusterError, ControlPlane, _Process, free_port, spawn

NODE_NAME = "127.0.0.1"
"""--hostname-override: the kubelet refuses a loopback --node-ip, but a node named by its
loopback address gets InternalIP 127.0.0.1, where the API server reaches it (logs, exec)."""
CLUSTER_DOMAIN = "cluster.local"
PAUSE_IMAGE = "localhost/pause:3.10"
HOST_SYSCTLS = ("kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory", "net/ipv4/ip_forward")
CGROUP_ROOT = Path("/sys/fs/cgroup")
DEVICE_PLUGINS = Path("/var/lib/kubelet/device-plugins")
CONTAINER_LOG_LINKS = Path("/var/log/containers")


def state_dir() -> Path:
    return Path(os.environ.get("ASSAY_E2E_NODE_DIR", "/var/tmp/assay-e2e-node"))


def content_dir() -> Path:
    return Path(os.environ.get("ASSAY_E2E_CONTAINERD_ROOT", Path.home() / ".cache" / "assay" / "node" / "containerd"))


class NodeUnavailable(Exception):
    """This machine cannot run a node (not root, no containerd/runc/CNI): skip outside CI."""


def check_prerequisites() -> None:
    if os.geteuid() != 0:
        raise NodeUnavailable("the e2e node needs root (containerd, cgroups, network namespaces)")
    missing = [tool for tool in ("containerd", "runc", "ctr", "ip", "openssl") if shutil.which(tool) is None]
    if not (network.CNI_BIN_DIR / "bridge").exists():
        missing.append(f"CNI plugins in {network.CNI_BIN_DIR}")
    if missing:
        raise NodeUnavailable(
            f"the e2e node needs {', '.join(missing)}: apt-get install -y containerd runc "
            "containernetworking-plugins iproute2 openssl"
        )


# --- leftovers of an interrupted run ------------------------------------------------------


def _pids_mentioning(text: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            pids.append(int(proc.name))
    return pids


def _kubepods_cgroups() -> list[Path]:
    """Every kubepods cgroup, deepest first (so that rmdir works bottom-up)."""
    found: list[Path] = []
    for hierarchy in CGROUP_ROOT.iterdir() if CGROUP_ROOT.is_dir() else ():
        top = hierarchy / "kubepods"
        if top.is_dir():
            found += [Path(root) for root, _, _ in os.walk(top)]
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def _kill_cgroup_members() -> None:
    for group in _kubepods_cgroups():
        try:
            pids = [int(p) for p in (group / "cgroup.procs").read_text().split()]
        except OSError:
            continue
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _remove_cgroups() -> None:
    for _ in range(20):
        _kill_cgroup_members()
        left = []
        for group in _kubepods_cgroups():
            try:
                group.rmdir()
            except OSError:
                left.append(group)
        if not left:
            return
        time.sleep(0.25)


def _unmount_under(prefix: Path) -> None:
    """Unmount everything mounted at or below `prefix`, deepest first."""
    for _ in range(5):
        targets = []
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            target = line.split()[4].replace("\\040", " ")
            if target == str(prefix) or target.startswith(f"{prefix}/"):
                targets.append(target)
        if not targets:
            return
        for target in sorted(set(targets), key=len, reverse=True):
            subprocess.run(["umount", "-l", target], capture_output=True, check=False)


def clean_host(root: Path) -> None:
    """Stop whatever a previous run under `root` left, and undo what it did to the host."""
    for attempt in range(2):
        pids = _pids_mentioning(str(root))
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL if attempt else signal.SIGTERM)
            except ProcessLookupError:
                pass
        if pids:
            time.sleep(1.0)
    _remove_cgroups()
    _unmount_under(root)
    network.remove_bridge()
    restore_sysctls(root)
    (DEVICE_PLUGINS / "kubelet.sock").unlink(missing_ok=True)
    if CONTAINER_LOG_LINKS.is_dir():
        for link in CONTAINER_LOG_LINKS.iterdir():
            if link.is_symlink() and str(os.readlink(link)).startswith(str(root)):
                link.unlink()
    shutil.rmtree(root, ignore_errors=True)


def leftovers(root: Path) -> list[str]:
    """What of a node under `root` is still on the host (empty after a clean stop)."""
    found = [f"process {pid}" for pid in _pids_mentioning(str(root))]
    mounts = [
        line.split()[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split()[4].startswith(str(root))
    ]
    found += [f"mount {m}" for m in mounts]
    found += [f"cgroup {g}" for g in _kubepods_cgroups()]
    if network.bridge_exists():
        found.append(f"bridge {network.BRIDGE}")
    if root.exists():
        found.append(f"directory {root}")
    return found


def save_sysctls(root: Path) -> None:
    saved = root.parent / f"{root.name}.sysctls.json"
    if not saved.exists():  # a leftover file holds the values from before the killed run
        values = {name: (Path("/proc/sys") / name).read_text().strip() for name in HOST_SYSCTLS}
        saved.write_text(json.dumps(values))


def restore_sysctls(root: Path) -> None:
    saved = root.parent / f"{root.name}.sysctls.json"
    if saved.exists():
        for name, value in json.loads(saved.read_text()).items():
            try:
                (Path("/proc/sys") / name).write_text(value)
            except OSError:
                pass
        saved.unlink()


# --- certificates for the node -----------------------------------------------------------


def _openssl(cwd: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _issue(pki: Path, ca_dir: Path, name: str, subject: str, ext: str) -> None:
    _openssl(pki, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", f"{name}.key")
    _openssl(pki, "req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", f"{name}.csr")
    (pki / f"{name}.ext").write_text(ext)
    _openssl(
        pki,
        "x509",
        "-req",
        "-in",
        f"{name}.csr",
        "-CA",
        str(ca_dir / "ca.crt"),
        "-CAkey",
        str(ca_dir / "ca.key"),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        f"{name}.ext",
        "-out",
        f"{name}.crt",
    )


# --- the node -----------------------------------------------------------------------------


class Node:
    """containerd + kubelet + kube-scheduler + CoreDNS for one control plane, on the test bridge."""

    def __init__(self, plane: ControlPlane, *, root: Path | None = None) -> None:
        self.plane = plane
        self.root = root or state_dir()
        self.socket = self.root / "containerd" / "containerd.sock"
        self.pod_logs = self.root / "pod-logs"
        self.volumes = self.root / "volumes"
        self._processes: list[_Process] = []

    # The bridge must exist before the API server binds its Service address.
    @staticmethod
    def prepare_host(root: Path | None = None) -> None:
        root = root or state_dir()
        clean_host(root)
        root.mkdir(parents=True)
        save_sysctls(root)
        network.create_bridge()

    def start(self, *, timeout: float = 120) -> Node:
        deadline = time.monotonic() + timeout
        try:
            self._start_containerd(deadline)
            self._start_kubelet()
            self._start_scheduler()
            self._start_coredns()
            self._wait_ready(deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, name: str, args: list[str]) -> _Process:
        process = spawn(name, args, workdir=self.root)
        self._processes.append(process)
        return process

    # containerd -------------------------------------------------------------------------

    def _start_containerd(self, deadline: float) -> None:
        base = self.root / "containerd"
        content_dir().mkdir(parents=True, exist_ok=True)
        cni_conf = self.root / "cni" / "net.d"
        network.write_cni_config(cni_conf, self.root / "cni" / "ipam")
        config = base / "config.toml"
        base.mkdir(parents=True, exist_ok=True)
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        config.write_text(f"""version = 2
root = "{content_dir()}"
state = "{base / "state"}"
[grpc]
  address = "{self.socket}"
[ttrpc]
  address = "{self.socket}.ttrpc"
[debug]
  level = "warn"
[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  # A negative oom_score_adj cannot be set on this VM (no CAP_SYS_RESOURCE).
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  [{cri}.cni]
    bin_dir = "{network.CNI_BIN_DIR}"
    conf_dir = "{cni_conf}"
  [{cri}.containerd]
    snapshotter = "overlayfs"
  [{cri}.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [{cri}.containerd.runtimes.runc.options]
      SystemdCgroup = false
""")
        process = self._spawn("containerd", ["containerd", f"--config={config}"])
        while time.monotonic() < deadline:
            if process.popen.poll() is not None:
                raise ClusterError(f"containerd exited ({process.popen.returncode}):\n{process.tail()}")
            if self.ctr("version", check=False).returncode == 0:
                self._remove_stale_containers()
                return
            time.sleep(0.2)
        raise ClusterError(f"containerd did not answer on {self.socket}:\n{process.tail()}")

    def ctr(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            ["ctr", f"--address={self.socket}", "--namespace=k8s.io", *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise ClusterError(f"ctr {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def _remove_stale_containers(self) -> None:
        """Containers a killed run left in the kept content store: their state dir is gone."""
        for container in self.ctr("containers", "list", "--quiet").stdout.split():
            self.ctr("tasks", "kill", "--signal=SIGKILL", container, check=False)
            self.ctr("tasks", "delete", "--force", container, check=False)
            self.ctr("containers", "delete", container, check=False)

    def has_image(self, ref: str) -> bool:
        return ref in self.ctr("images", "list", "--quiet").stdout.split()

    # kubelet -----------------------------------------------------------------------------

    def _start_kubelet(self) -> None:
        pki = self.root / "kubelet-pki"
        pki.mkdir(parents=True, exist_ok=True)
        _issue(
            pki,
            self.plane.pki,
            "client",
            f"/O=system:nodes/CN=system:node:{NODE_NAME}",
            "extendedKeyUsage=clientAuth\n",
        )
        _issue(
            pki,
            self.plane.pki,
            "serving",
            f"/CN={NODE_NAME}",
            f"subjectAltName=IP:{NODE_NAME}\nextendedKeyUsage=serverAuth\n",
        )
        kubeconfig = self.root / "kubelet.kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "node",
                    "clusters": [
                        {
                            "name": "e2e",
                            "cluster": {"server": self.plane.server, "certificate-authority": str(self.plane.ca_file)},
                        }
                    ],
                    "users": [
                        {
                            "name": "node",
                            "user": {
                                "client-certificate": str(pki / "client.crt"),
                                "client-key": str(pki / "client.key"),
                            },
                        }
                    ],
                    "contexts": [{"name": "node", "context": {"cluster": "e2e", "user": "node"}}],
                }
            )
        )
        endpoint = f"unix://{self.socket}"
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": NODE_NAME,
            "port": free_port(),
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": free_port(),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.plane.ca_file)},
            },
            "authorization": {"mode": "Webhook"},
            "tlsCertFile": str(pki / "serving.crt"),
            "tlsPrivateKeyFile": str(pki / "serving.key"),
            "cgroupDriver": "cgroupfs",
            "cgroupsPerQOS": True,
            "enforceNodeAllocatable": [],
            "failSwapOn": False,
            "oomScoreAdj": 0,
            "containerRuntimeEndpoint": endpoint,
            "imageServiceEndpoint": endpoint,
            "podLogsDir": str(self.pod_logs),
            "clusterDNS": [network.GATEWAY],
            "clusterDomain": CLUSTER_DOMAIN,
            "resolvConf": "",
            # Nothing is evicted or garbage-collected from under the tests on a busy disk.
            "evictionHard": {
                "memory.available": "1Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "makeIPTablesUtilChains": False,
            "serializeImagePulls": False,
            "syncFrequency": "5s",
            "fileCheckFrequency": "5s",
            "nodeStatusUpdateFrequency": "5s",
            "maxPods": 60,
        }
        (self.root / "kubelet.yaml").write_text(yaml.safe_dump(config))
        self._spawn(
            "kubelet",
            [
                str(self.plane.bin_dir / "kubelet"),
                f"--config={self.root / 'kubelet.yaml'}",
                f"--kubeconfig={kubeconfig}",
                f"--hostname-override={NODE_NAME}",
                f"--root-dir={self.root / 'kubelet'}",
                f"--cert-dir={pki}",
                "--v=1",
            ],
        )

    def _start_scheduler(self) -> None:
        admin = str(self.plane.admin_kubeconfig)
        self._spawn(
            "kube-scheduler",
            [
                str(self.plane.bin_dir / "kube-scheduler"),
                f"--kubeconfig={admin}",
                f"--authentication-kubeconfig={admin}",
                f"--authorization-kubeconfig={admin}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--v=0",
            ],
        )

    def _start_coredns(self) -> None:
        """Cluster DNS on the pods' gateway: headless Services resolve (`<pod>.<service>`), nothing
        else is forwarded anywhere."""
        corefile = self.root / "Corefile"
        corefile.write_text(f""".:53 {{
    bind {network.GATEWAY}
    errors
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {self.plane.admin_kubeconfig} assay-e2e
        pods insecure
        ttl 5
    }}
    cache 5
}}
""")
        self._spawn("coredns", [str(self.plane.bin_dir / "coredns"), f"-conf={corefile}"])

    def _wait_ready(self, deadline: float) -> None:
        last = ""
        while time.monotonic() < deadline:
            for process in self._processes:
                if process.popen.poll() is not None:
                    raise ClusterError(f"{process.name} exited ({process.popen.returncode}):\n{process.tail()}")
            result = self.plane.kubectl("get", "node", NODE_NAME, "-o", "json", check=False)
            if result.returncode == 0:
                conditions = {c["type"]: c for c in json.loads(result.stdout)["status"].get("conditions", [])}
                ready = conditions.get("Ready", {})
                if ready.get("status") == "True":
                    return
                last = ready.get("message", "")
            time.sleep(0.5)
        logs = "\n".join(f"--- {p.name}\n{p.tail(20)}" for p in self._processes)
        raise ClusterError(f"node {NODE_NAME} did not become Ready ({last}):\n{logs}")

    def logs(self) -> dict[str, str]:
        return {p.name: p.tail(400) for p in self._processes}

    def stop(self) -> None:
        """Pods first (so the kubelet tears their mounts down), then the agents, then the host."""
        for process in reversed(self._processes):
            if process.name == "containerd" and process.popen.poll() is None:
                self._remove_stale_containers()
            process.stop()
        self._processes.clear()
        clean_host(self.root)
