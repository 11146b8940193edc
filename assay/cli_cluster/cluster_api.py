"""The cluster commands' one way to the API server: kubectl's kubeconfig rules, a few reads.

The kubernetes package's client (the one the runner patches status with), not the operator's
`kube`: that one is built for a controller's request rate (a kept-alive connection per
handler thread, namespaced JSON paths only, a 60 s read timeout), while these commands send
a handful of requests and need what it leaves out: lists across namespaces, and pod logs as
text and as an endless stream (`assay logs -f`). Every request of `assay get`, `results`,
`logs` and `describe` goes through `Cluster`, and every failure leaves it as `ClusterError`:
one sentence naming what failed and where, never a traceback.

The credentials are found as kubectl finds them: `--kubeconfig`, else $KUBECONFIG (a list
of files, merged), else ~/.kube/config, else the pod's service account when running in a
cluster. The namespace is `-n`, else the context's, else `default`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from assay import echoed_text
from assay import spec as spec_module
from assay.errors import UserError

Manifest = dict[str, Any]
REQUEST_TIMEOUT = (10.0, 60.0)
"""Seconds to connect and to wait for an answer: a hung API server fails the command."""
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
USER_AGENT = "assay-cli"
_T = TypeVar("_T")


class ClusterError(UserError):
    """A request the cluster could not answer, as one sentence (exit 1)."""


class NotFound(ClusterError):
    """The object asked for does not exist (HTTP 404)."""


class NoEvaluationResource(ClusterError):
    """The cluster does not serve Evaluations: Assay's CRD is not installed."""


@dataclasses.dataclass(frozen=True)
class Target:
    """Where requests go and as whom: a kubernetes.client.Configuration, and the default namespace."""

    configuration: Any
    namespace: str
    source: str
    """The kubeconfig files read, or "in-cluster": named in error messages."""


def find_target(
    *, kubeconfig: str | None = None, context: str | None = None, environ: Mapping[str, str] | None = None
) -> Target:
    """kubectl's order: the files named (flag, $KUBECONFIG or ~/.kube/config), else in-cluster."""
    from kubernetes import client, config

    environ = os.environ if environ is None else environ
    named = kubeconfig or environ.get("KUBECONFIG") or str(Path("~/.kube/config").expanduser())
    files = [p for p in named.split(os.pathsep) if p and Path(p).expanduser().is_file()]
    configuration = client.Configuration()
    if files:
        joined = os.pathsep.join(files)
        try:
            config.load_kube_config(
                config_file=joined, context=context, client_configuration=configuration, persist_config=False
            )
            contexts, current = config.list_kube_config_contexts(config_file=joined)
        except Exception as error:
            raise ClusterError(f"The kubeconfig {joined} cannot be used: {_first_line(error)}.") from None
        chosen = next((c for c in contexts if c.get("name") == context), None) if context else current
        return Target(configuration, ((chosen or {}).get("context") or {}).get("namespace") or "default", joined)
    if kubeconfig:
        raise ClusterError(f"The kubeconfig {kubeconfig} does not exist.")
    if context is None and environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException as error:
            raise ClusterError(f"The pod's service account cannot be used: {_first_line(error)}.") from None
        namespace = SERVICE_ACCOUNT_NAMESPACE.read_text().strip() if SERVICE_ACCOUNT_NAMESPACE.is_file() else ""
        return Target(configuration, namespace or "default", "in-cluster")
    raise ClusterError(
        f"No Kubernetes configuration found: {named} does not exist; set KUBECONFIG or write "
        "~/.kube/config as for kubectl (or pass --kubeconfig)."
    )


class Cluster:
    """The reads the cluster commands make; plain dicts (the API server's JSON) out."""

    def __init__(self, target: Target) -> None:
        from kubernetes import client

        target.configuration.retries = 1  # one more try on a dropped connection, not urllib3's three
        api_client = client.ApiClient(target.configuration)
        api_client.user_agent = USER_AGENT
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.namespace = target.namespace
        self.server = str(target.configuration.host)

    def evaluations(self, *, namespace: str | None, selector: str | None = None) -> list[Manifest]:
        """The Evaluations of one namespace, or of all (`namespace` None), sorted as kubectl sorts them."""
        group, version, plural = spec_module.GROUP, spec_module.VERSION, spec_module.PLURAL
        if namespace is None:
            found = self._json(
                lambda: self.custom.list_cluster_custom_object(group, version, plural, label_selector=selector, **_RAW)
            )
        else:
            found = self._json(
                lambda: self.custom.list_namespaced_custom_object(
                    group, version, namespace, plural, label_selector=selector, **_RAW
                )
            )
        items: list[Manifest] = found.get("items") or []
        return sorted(items, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"].get("name", "")))

    def evaluation(self, *, namespace: str, name: str) -> Manifest:
        """One Evaluation; NotFound names it, its namespace and the names that come close."""
        group, version, plural = spec_module.GROUP, spec_module.VERSION, spec_module.PLURAL
        try:
            found: Manifest = self._json(
                lambda: self.custom.get_namespaced_custom_object(group, version, namespace, plural, name, **_RAW)
            )
        except NotFound:
            raise NotFound(
                f'Evaluation "{name}" not found in namespace "{namespace}".{self._close_names(namespace, name)}'
            ) from None
        return found

    def pods(self, *, namespace: str, selector: str) -> list[Manifest]:
        items: list[Manifest] = (
            self._json(lambda: self.core.list_namespaced_pod(namespace, label_selector=selector, **_RAW)).get("items")
            or []
        )
        return items

    def events(self, *, namespace: str) -> list[Manifest]:
        items: list[Manifest] = (
            self._json(lambda: self.core.list_namespaced_event(namespace, **_RAW)).get("items") or []
        )
        return items

    def log(self, *, namespace: str, pod: str, container: str, follow: bool) -> Iterator[bytes]:
        """A container's log as it arrives; with `follow`, until the container ends (no read timeout)."""
        timeout = None if follow else REQUEST_TIMEOUT
        # The raw urllib3 response (typed as the decoded str the client would return otherwise).
        response: Any = self._call(
            lambda: self.core.read_namespaced_pod_log(
                pod, namespace, container=container, follow=follow, _preload_content=False, _request_timeout=timeout
            )
        )
        chunks = response.stream(4096)
        try:
            while (chunk := self._call(lambda: next(chunks, None))) is not None:
                yield chunk
        finally:
            response.release_conn()

    def _close_names(self, namespace: str, name: str) -> str:
        from assay.errors import suggest

        try:
            return suggest(name, [o["metadata"]["name"] for o in self.evaluations(namespace=namespace)])
        except ClusterError:
            return ""

    def _json(self, request: Callable[[], Any]) -> Any:
        response = self._call(request)
        return json.loads(response.data or b"{}")

    def _call(self, request: Callable[[], _T]) -> _T:
        """`request()`, its failures as ClusterError."""
        from kubernetes.client.exceptions import ApiException

        try:
            return request()
        except ApiException as error:
            raise _api_error(error, server=self.server) from None
        except Exception as error:
            if type(error).__module__.startswith(("urllib3", "ssl", "socket")) or isinstance(error, OSError):
                raise ClusterError(f"Cannot reach the API server at {self.server}: {_reason(error)}.") from None
            raise


_RAW: dict[str, Any] = {"_preload_content": False, "_request_timeout": REQUEST_TIMEOUT}
"""The answer as bytes, decoded here: the client's models would rename fields to snake_case."""


def _api_error(error: Any, *, server: str) -> ClusterError:
    status = int(getattr(error, "status", 0) or 0)
    try:
        said = str(json.loads(error.body or "{}").get("message") or "")
    except (ValueError, AttributeError):
        said = ""
    said = echoed_text.bounded(said or str(getattr(error, "reason", "") or ""), 300).rstrip(".")
    if status == 404:
        if "could not find the requested resource" in said:
            return NoEvaluationResource(
                f"The cluster at {server} has no Evaluation resource ({spec_module.PLURAL}.{spec_module.GROUP}); "
                "install Assay's CRD with its Helm chart (deploy/helm/assay)."
            )
        return NotFound(f"Not found: {said}.")
    if status == 400:  # the server's own words say it all: 'container "runner" ... is waiting to start'
        return ClusterError(f"{said}.")
    if status == 401:
        return ClusterError(
            f"The API server at {server} refused the kubeconfig's credentials (401 Unauthorized); "
            "log in again or pick another context."
        )
    if status == 403:
        return ClusterError(f"Forbidden: {said}; ask your cluster admin for that permission.")
    return ClusterError(f"The API server at {server} answered {status} {getattr(error, 'reason', '') or ''}: {said}.")


def _reason(error: Exception) -> str:
    """The cause of a failed connection, without urllib3's object reprs: "Connection refused"."""
    text = str(getattr(error, "reason", None) or error)
    errno = re.search(r"\[Errno -?\d+\] ([^'\"\)]+)", text)
    if errno:
        return errno.group(1).strip()
    if "timed out" in text.lower():
        return "timed out"
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return "its TLS certificate was not trusted (certificate verify failed)"
    return _first_line(error)


def _first_line(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    return echoed_text.bounded(lines[0] if lines else type(error).__name__, 300).rstrip(".")
