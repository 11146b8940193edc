"""FakeKubelet: a TEST STAND-IN for the kubelet, running runner pods as local processes.

There is no container runtime on these machines, so nothing can run an image. This agent
does the part of a kubelet's job that the operator and the Job controller observe, with
the real API server and the real Job controller on the other side:

- it watches pods created by runner Jobs (label `app.kubernetes.io/managed-by=assay-operator`;
  a real kubelet watches pods bound to its node), and for each new one
- runs its init containers in order, then its container, as local processes: the
  container's `command` + `args` (resolved on this machine's PATH: the "image" is the
  Python environment the tests run in), with the pod's environment (literal values,
  downward API fieldRefs, Secret and ConfigMap keys) on top of a small "image
  environment" the test supplies;
- gives each volume a directory (emptyDir: per pod; PVC: per claim, shared by pods) and,
  lacking mount namespaces, rewrites mount paths at the start of env values and args to
  those directories;
- mints a real, pod-bound token for the pod's ServiceAccount through the TokenRequest API
  and writes token, ca.crt and namespace where the pod's projected service-account volume
  says; the Python client finds in-cluster credentials only at the fixed path
  /var/run/secrets/kubernetes.io/serviceaccount, which a process without its own mount
  namespace cannot have, so the pod gets KUBECONFIG pointing at a kubeconfig that uses
  that same token file (the runner's `load_incluster_config()` falls back to it);
- plays cluster DNS for Indexed Jobs: the headless-Service names `<host>.<subdomain>[:port]`
  in args and env become `127.0.0.1:<a free port per Service port>` so that several
  "nodes" share one loopback;
- patches pod status as a kubelet does (Running with Ready; then Succeeded or Failed with
  each container's exit code), which the REAL Job controller turns into Job conditions,
  retries (backoffLimit) and podFailurePolicy decisions;
- kills the processes of a pod that is deleted.

Not emulated: images, securityContext (processes run as the test user), resources and
GPUs, probes, restarts (runner pods use restartPolicy Never), scheduling (pods never get
a nodeName, so the API server deletes them at once and the garbage collector never waits
for a kubelet).
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from tests.e2e.cluster.control_plane import die_with_parent, free_port

RUNNER_POD_SELECTOR = "app.kubernetes.io/managed-by=assay-operator"
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_SECONDS = 3600
KILL_GRACE_SECONDS = 5.0


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclasses.dataclass
class PodRun:
    """What the agent did with one pod: its directory, processes and exit codes."""

    namespace: str
    name: str
    uid: str
    directory: Path
    exit_codes: dict[str, int] = dataclasses.field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    deleted: bool = False
    finished: threading.Event = dataclasses.field(default_factory=threading.Event)

    def log(self, container: str) -> str:
        path = self.directory / f"{container}.log"
        return path.read_text(errors="replace") if path.exists() else ""


class FakeKubelet:
    """Runs runner pods as local processes (see the module docstring for what is emulated).

    `api_client` is a kubernetes.client.ApiClient with admin credentials (a kubelet is
    privileged); `server` and `ca_file` are what a pod's kubeconfig points at.
    """

    def __init__(self, *, api_client: Any, server: str, ca_file: Path, workdir: Path,
                 image_env: Mapping[str, str] | None = None, selector: str = RUNNER_POD_SELECTOR) -> None:  # fmt: skip
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.server = server
        self.ca_file = ca_file
        self.workdir = workdir
        self.image_env = dict(image_env or {})
        self.selector = selector
        self.runs: dict[str, PodRun] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ports: dict[tuple[str, str, int], int] = {}
        self._watcher = threading.Thread(target=self._watch_loop, name="fake-kubelet", daemon=True)

    # --- lifecycle --------------------------------------------------------------------

    def start(self) -> "FakeKubelet":
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._watcher.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            runs = list(self.runs.values())
        for run in runs:
            self._kill(run)
        self._watcher.join(timeout=10)

    def runs_in(self, namespace: str) -> list[PodRun]:
        with self._lock:
            return [r for r in self.runs.values() if r.namespace == namespace]

    # --- watching ---------------------------------------------------------------------

    def _watch_loop(self) -> None:
        from kubernetes import watch

        resource_version = None
        while not self._stopping.is_set():
            try:
                if resource_version is None:
                    listing = self.core.list_pod_for_all_namespaces(label_selector=self.selector)
                    resource_version = listing.metadata.resource_version
                    for pod in listing.items:
                        self._on_pod("ADDED", self.core.api_client.sanitize_for_serialization(pod))
                stream = watch.Watch().stream(
                    self.core.list_pod_for_all_namespaces, label_selector=self.selector,
                    resource_version=resource_version, timeout_seconds=5, _request_timeout=10,
                    allow_watch_bookmarks=True,
                )  # fmt: skip
                for event in stream:
                    if self._stopping.is_set():
                        return
                    obj = event["raw_object"]
                    resource_version = obj.get("metadata", {}).get("resourceVersion", resource_version)
                    if event["type"] == "ERROR":
                        resource_version = None  # 410 Gone: relist
                        break
                    if event["type"] != "BOOKMARK":
                        self._on_pod(event["type"], obj)
            except Exception as error:  # noqa: BLE001 - the API server restarts or a watch expires
                if self._stopping.is_set():
                    return
                if getattr(error, "status", None) == 410:
                    resource_version = None
                time.sleep(0.5)

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        with self._lock:
            run = self.runs.get(uid)
        if kind == "DELETED" or meta.get("deletionTimestamp"):
            if run is not None and not run.deleted:
                run.deleted = True
                self._kill(run)
            return
        if run is not None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return
        directory = self.workdir / meta["namespace"] / f"{meta['name']}-{uid[:8]}"
        run = PodRun(meta["namespace"], meta["name"], uid, directory)
        with self._lock:
            self.runs[uid] = run
        threading.Thread(target=self._run_pod, args=(pod, run), name=f"pod-{meta['name']}", daemon=True).start()

    # --- running a pod ----------------------------------------------------------------

    def _run_pod(self, pod: dict[str, Any], run: PodRun) -> None:
        spec = pod["spec"]
        try:
            run.directory.mkdir(parents=True, exist_ok=True)
            volumes = self._volumes(pod, run)
            started = _now()
            init_statuses: list[dict[str, Any]] = []
            for container in spec.get("initContainers") or ():
                code = self._run_container(pod, run, container, volumes)
                init_statuses.append(_terminated(container, code, started))
                if code != 0 or run.deleted:
                    self._patch_status(run, _pod_status("Failed", started, init_statuses, []))
                    return
            if run.deleted:
                return
            containers = spec["containers"]
            running = [_running(c, started) for c in containers]
            self._patch_status(run, _pod_status("Running", started, init_statuses, running))
            codes = [self._run_container(pod, run, c, volumes) for c in containers]
            if run.deleted:
                return
            phase = "Succeeded" if all(code == 0 for code in codes) else "Failed"
            finished = [_terminated(c, code, started) for c, code in zip(containers, codes)]
            self._patch_status(run, _pod_status(phase, started, init_statuses, finished))
        except Exception as error:  # noqa: BLE001 - a broken pod must not stop the agent
            import traceback

            (run.directory / "agent-error.log").write_text(traceback.format_exc())
            if not run.deleted:
                try:
                    self._patch_status(run, _pod_status("Failed", _now(), [], [], message=repr(error)))
                except Exception:  # noqa: BLE001
                    pass
        finally:
            run.finished.set()

    def _run_container(self, pod: dict[str, Any], run: PodRun, container: dict[str, Any],
                       volumes: dict[str, Path]) -> int:  # fmt: skip
        mounts = {m["mountPath"].rstrip("/"): volumes[m["name"]] / m.get("subPath", "")
                  for m in container.get("volumeMounts") or () if m["name"] in volumes}  # fmt: skip
        rewrite = self._rewriter(pod, mounts)
        env = self._environment(pod, container, mounts, rewrite)
        argv = [rewrite(a) for a in [*(container.get("command") or ()), *(container.get("args") or ())]]
        if not argv:
            raise ValueError(f"container {container['name']} has no command: images are not run here")
        executable = shutil.which(argv[0], path=env.get("PATH"))
        if executable is None:
            raise FileNotFoundError(f"{argv[0]} not found on the image PATH {env.get('PATH')}")
        cwd = rewrite(container["workingDir"]) if container.get("workingDir") else str(run.directory)
        with open(run.directory / f"{container['name']}.log", "ab") as log:
            process = subprocess.Popen([executable, *argv[1:]], env=env, cwd=cwd, stdout=log,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True, preexec_fn=die_with_parent)  # fmt: skip
            run.process = process
            if run.deleted:
                self._kill(run)
            code = process.wait()
        run.exit_codes[container["name"]] = code
        # A signal's death is reported as 128+N, as container runtimes do.
        return code if code >= 0 else 128 - code

    def _kill(self, run: PodRun) -> None:
        process = run.process
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(KILL_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def _patch_status(self, run: PodRun, status: dict[str, Any]) -> None:
        from kubernetes.client import exceptions

        try:
            self.core.patch_namespaced_pod_status(run.name, run.namespace, {"status": status})
        except exceptions.ApiException as error:
            if error.status != 404:  # deleted meanwhile
                raise

    # --- volumes, credentials, environment -----------------------------------------------

    def _volumes(self, pod: dict[str, Any], run: PodRun) -> dict[str, Path]:
        namespace = pod["metadata"]["namespace"]
        out: dict[str, Path] = {}
        for volume in pod["spec"].get("volumes") or ():
            name = volume["name"]
            if "persistentVolumeClaim" in volume:
                path = self.workdir / "pvc" / namespace / volume["persistentVolumeClaim"]["claimName"]
            else:
                path = run.directory / "volumes" / name
            path.mkdir(parents=True, exist_ok=True)
            if "projected" in volume:
                self._project(pod, volume["projected"], path)
            out[name] = path
        return out

    def _project(self, pod: dict[str, Any], projected: dict[str, Any], path: Path) -> None:
        """The service-account volume the ServiceAccount admission plugin adds: token, CA, namespace."""
        from kubernetes import client

        meta = pod["metadata"]
        for source in projected.get("sources") or ():
            if "serviceAccountToken" in source:
                request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
                    audiences=[source["serviceAccountToken"].get("audience")] if source["serviceAccountToken"].get("audience") else [],
                    expiration_seconds=TOKEN_SECONDS,
                    bound_object_ref=client.V1BoundObjectReference(kind="Pod", api_version="v1", name=meta["name"],
                                                                   uid=meta["uid"]),
                ))  # fmt: skip
                token = self.core.create_namespaced_service_account_token(
                    pod["spec"].get("serviceAccountName") or "default", meta["namespace"], request
                ).status.token
                (path / source["serviceAccountToken"]["path"]).write_text(token)
            elif "configMap" in source:
                for item in source["configMap"].get("items") or ():
                    if item["key"] == "ca.crt":
                        (path / item["path"]).write_bytes(self.ca_file.read_bytes())
            elif "downwardAPI" in source:
                for item in source["downwardAPI"].get("items") or ():
                    value = _field(pod, item["fieldRef"]["fieldPath"]) if "fieldRef" in item else ""
                    (path / item["path"]).write_text(value)

    def _environment(self, pod: dict[str, Any], container: dict[str, Any], mounts: dict[str, Path],
                     rewrite: Callable[[str], str]) -> dict[str, str]:  # fmt: skip
        namespace = pod["metadata"]["namespace"]
        spec = pod["spec"]
        env = dict(self.image_env)
        env["HOSTNAME"] = spec.get("hostname") or pod["metadata"]["name"]
        sa_dir = mounts.get(SA_MOUNT)
        if sa_dir is not None and (sa_dir / "token").exists():
            config = {
                "apiVersion": "v1", "kind": "Config", "current-context": "in-cluster",
                "clusters": [{"name": "in-cluster", "cluster": {"server": self.server,
                                                                "certificate-authority": str(sa_dir / "ca.crt")}}],
                "users": [{"name": "sa", "user": {"tokenFile": str(sa_dir / "token")}}],
                "contexts": [{"name": "in-cluster", "context": {"cluster": "in-cluster", "user": "sa",
                                                                "namespace": namespace}}],
            }  # fmt: skip
            path = sa_dir.parent / f"{sa_dir.name}.kubeconfig"
            path.write_text(yaml.safe_dump(config))
            env["KUBECONFIG"] = str(path)
        for item in container.get("env") or ():
            if "value" in item:
                env[item["name"]] = rewrite(str(item["value"]))
            elif "valueFrom" in item:
                env[item["name"]] = self._value_from(pod, item["valueFrom"])
        return env

    def _value_from(self, pod: dict[str, Any], source: dict[str, Any]) -> str:
        import base64

        namespace = pod["metadata"]["namespace"]
        if "fieldRef" in source:
            return _field(pod, source["fieldRef"]["fieldPath"])
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            data = self.core.read_namespaced_secret(ref["name"], namespace).data or {}
            return base64.b64decode(data[ref["key"]]).decode()
        if "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            return (self.core.read_namespaced_config_map(ref["name"], namespace).data or {})[ref["key"]]
        raise ValueError(f"unsupported env source {sorted(source)}")

    def _rewriter(self, pod: dict[str, Any], mounts: dict[str, Path]) -> Callable[[str], str]:
        """Mount paths → volume directories; headless-Service DNS names → 127.0.0.1:<port>."""
        namespace = pod["metadata"]["namespace"]
        subdomain = pod["spec"].get("subdomain")
        dns = None
        if subdomain:
            suffix = rf"\.{re.escape(subdomain)}(?:\.{re.escape(namespace)}(?:\.svc(?:\.cluster\.local)?)?)?"
            dns = re.compile(rf"\b[a-z0-9]([a-z0-9-]*[a-z0-9])?{suffix}(?::(?P<port>\d+))?\b")

        def local_address(match: re.Match[str]) -> str:
            port = match.group("port")
            if port is None:
                return "127.0.0.1"
            with self._lock:
                key = (namespace, str(subdomain), int(port))
                if key not in self._ports:
                    self._ports[key] = free_port()
                return f"127.0.0.1:{self._ports[key]}"

        def rewrite(value: str) -> str:
            for mount in sorted(mounts, key=len, reverse=True):
                if value == mount or value.startswith(mount + "/"):
                    value = str(mounts[mount]) + value[len(mount):]
                    break
            if dns is not None:
                value = dns.sub(local_address, value)
            return value

        return rewrite


def _field(pod: dict[str, Any], path: str) -> str:
    meta = pod["metadata"]
    simple = {
        "metadata.name": meta["name"],
        "metadata.namespace": meta["namespace"],
        "metadata.uid": meta["uid"],
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName", ""),
        "spec.nodeName": "fake-kubelet",
        "status.podIP": "127.0.0.1",
        "status.hostIP": "127.0.0.1",
    }
    if path in simple:
        return simple[path]
    match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise ValueError(f"unsupported fieldRef {path}")


def _running(container: dict[str, Any], started: str) -> dict[str, Any]:
    return {"name": container["name"], "image": container.get("image", ""), "imageID": "", "ready": True,
            "restartCount": 0, "started": True, "state": {"running": {"startedAt": started}}}  # fmt: skip


def _terminated(container: dict[str, Any], code: int, started: str) -> dict[str, Any]:
    return {
        "name": container["name"], "image": container.get("image", ""), "imageID": "", "ready": False,
        "restartCount": 0, "started": False,
        "state": {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                 "startedAt": started, "finishedAt": _now()}},
    }  # fmt: skip


def _pod_status(phase: str, started: str, init: list[dict[str, Any]], containers: list[dict[str, Any]],
                message: str | None = None) -> dict[str, Any]:  # fmt: skip
    ready = "True" if phase == "Running" else "False"
    now = _now()
    conditions = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": started},
        {"type": "Initialized", "status": "True" if phase != "Failed" or containers else "False",
         "lastTransitionTime": now},
        {"type": "ContainersReady", "status": ready, "lastTransitionTime": now},
        {"type": "Ready", "status": ready, "lastTransitionTime": now},
    ]  # fmt: skip
    status: dict[str, Any] = {"phase": phase, "startTime": started, "hostIP": "127.0.0.1", "podIP": "127.0.0.1",
                              "podIPs": [{"ip": "127.0.0.1"}], "conditions": conditions}  # fmt: skip
    if init:
        status["initContainerStatuses"] = init
    if containers:
        status["containerStatuses"] = containers
    if message:
        status["message"] = message
    return status
