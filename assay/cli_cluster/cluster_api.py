"""The cluster commands' one way to the API server: kubectl's kubeconfig rules, a few reads.

On the product's one client (`assay.kube`), as the operator and the runner are: a handful
of requests, a connect that gives up after CONNECT_TIMEOUT, lists across namespaces, and
pod logs read as they arrive (`assay logs -f`: no read timeout). Every request of `assay
get`, `results`, `logs` and `describe` goes through `Cluster`, and every failure leaves it
as `ClusterError`: one sentence naming what failed and where, never a traceback. Errors are
read by type (`api_errors.ApiError`'s code and Status), not by the words of an answer,
except the one phrase kube-apiserver gives a kind it does not serve.

The credentials are found as kubectl finds them: `--kubeconfig`, else $KUBECONFIG (a list
of files, merged), else ~/.kube/config, else the pod's service account when running in a
cluster; `--context`, else the current context. The namespace is `-n`, else the context's,
else `default`. What a kubeconfig may hold is `assay.kube.credentials`'s to say.
"""

from __future__ import annotations

import dataclasses
import os
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from assay import echoed_text
from assay import spec as spec_module
from assay.errors import UserError
from assay.kube import api_errors, api_session, credentials
from assay.kube import client as kube_client

Manifest = dict[str, Any]
CONNECT_TIMEOUT = 10.0
"""Seconds a connect may take: an API server that does not answer fails the command."""
READ_TIMEOUT = api_session.TIMEOUT
"""Seconds to wait for an answer (except a followed log's next line)."""
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
    """Where requests go and as whom: a client on the credentials found, and the default namespace."""

    client: kube_client.ApiClient
    namespace: str
    source: str
    """The kubeconfig files read, or "in-cluster": named in error messages."""


def find_target(
    *, kubeconfig: str | None = None, context: str | None = None, environ: Mapping[str, str] | None = None
) -> Target:
    """kubectl's order: the files named (flag, $KUBECONFIG or ~/.kube/config), else in-cluster."""
    environ = os.environ if environ is None else environ
    named = kubeconfig or environ.get("KUBECONFIG") or str(Path("~/.kube/config").expanduser())
    files = [p for p in named.split(os.pathsep) if p and Path(p).expanduser().is_file()]
    if files:
        joined = os.pathsep.join(files)
        try:
            found = credentials.from_kubeconfig([Path(f).expanduser() for f in files], context=context)
            return Target(_client(found), found.namespace or "default", joined)
        except Exception as error:  # whatever the files hold (they are the user's): one sentence
            raise ClusterError(f"The kubeconfig {joined} cannot be used: {_first_line(error)}.") from None
    if kubeconfig:
        raise ClusterError(f"The kubeconfig {kubeconfig} does not exist.")
    if context is None and environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            found = credentials.in_cluster(environ)
            return Target(_client(found), found.namespace or "default", "in-cluster")
        except Exception as error:
            raise ClusterError(f"The pod's service account cannot be used: {_first_line(error)}.") from None
    raise ClusterError(
        f"No Kubernetes configuration found: {named} does not exist; set KUBECONFIG or write "
        "~/.kube/config as for kubectl (or pass --kubeconfig)."
    )


def _client(found: credentials.Credentials) -> kube_client.ApiClient:
    return kube_client.ApiClient(api_session.Session(found, connect_timeout=CONNECT_TIMEOUT), user_agent=USER_AGENT)


class Cluster:
    """The reads the cluster commands make; plain dicts (the API server's JSON) out."""

    def __init__(self, target: Target) -> None:
        self.client = target.client
        self.namespace = target.namespace
        self.server = target.client.server

    def evaluations(self, *, namespace: str | None, selector: str | None = None) -> list[Manifest]:
        """The Evaluations of one namespace, or of all (`namespace` None), sorted as kubectl sorts them."""
        root = f"/apis/{spec_module.API_VERSION}"
        where = f"{root}/{spec_module.PLURAL}" if namespace is None else _under(root, namespace, spec_module.PLURAL)
        items = self._items(where, selector)
        return sorted(items, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"].get("name", "")))

    def evaluation(self, *, namespace: str, name: str) -> Manifest:
        """One Evaluation; NotFound names it, its namespace and the names that come close."""
        path = _under(f"/apis/{spec_module.API_VERSION}", namespace, spec_module.PLURAL, name)
        try:
            found: Manifest = self._call(lambda: self.client.request("GET", path))
        except NotFound:
            raise NotFound(
                f'Evaluation "{name}" not found in namespace "{namespace}".{self._close_names(namespace, name)}'
            ) from None
        return found

    def pods(self, *, namespace: str, selector: str) -> list[Manifest]:
        return self._items(_under("/api/v1", namespace, "pods"), selector)

    def events(self, *, namespace: str) -> list[Manifest]:
        return self._items(_under("/api/v1", namespace, "events"), None)

    def log(self, *, namespace: str, pod: str, container: str, follow: bool) -> Iterator[bytes]:
        """A container's log as it arrives; with `follow`, until the container ends (no read timeout)."""
        query = {"container": container, **({"follow": "true"} if follow else {})}
        chunks = self.client.stream(
            _under("/api/v1", namespace, "pods", pod, "log"),
            query=query,
            read_timeout=None if follow else READ_TIMEOUT,
        )
        try:
            while (chunk := self._call(lambda: next(chunks, None))) is not None:
                yield chunk
        finally:
            chunks.close()

    def _items(self, path: str, selector: str | None) -> list[Manifest]:
        query = {"labelSelector": selector} if selector else None
        found = self._call(lambda: self.client.request("GET", path, query=query))
        items: list[Manifest] = (found or {}).get("items") or []
        return items

    def _close_names(self, namespace: str, name: str) -> str:
        from assay.errors import suggest

        try:
            return suggest(name, [o["metadata"]["name"] for o in self.evaluations(namespace=namespace)])
        except ClusterError:
            return ""

    def _call(self, request: Callable[[], _T]) -> _T:
        """`request()`, its failures as ClusterError."""
        try:
            return request()
        except api_errors.ApiError as error:
            raise _api_error(error, server=self.server) from None
        except credentials.ConfigError as error:  # an exec plugin that failed, a token file gone
            raise ClusterError(f"No credentials for the API server at {self.server}: {_first_line(error)}.") from None
        except api_session.UNREACHABLE as error:  # refused, reset, timed out, TLS, a garbled answer
            raise ClusterError(f"Cannot reach the API server at {self.server}: {_reason(error)}.") from None


def _under(root: str, namespace: str, plural: str, *names: str) -> str:
    """A namespaced REST path; the namespace and names as the user typed them, each quoted as one segment."""
    return "/".join([root, "namespaces", *(urllib.parse.quote(part, safe="") for part in (namespace, plural, *names))])


def _api_error(error: api_errors.ApiError, *, server: str) -> ClusterError:
    said = echoed_text.bounded(error.message or error.reason or f"HTTP {error.code}", 300).rstrip(".")
    if error.code == 404:
        if "could not find the requested resource" in said:
            return NoEvaluationResource(
                f"The cluster at {server} has no Evaluation resource ({spec_module.PLURAL}.{spec_module.GROUP}); "
                "install Assay's CRD with its Helm chart (deploy/helm/assay)."
            )
        return NotFound(f"Not found: {said}.")
    if error.code == 400:  # the server's own words say it all: 'container "runner" ... is waiting to start'
        return ClusterError(f"{said}.")
    if error.code == 401:
        return ClusterError(
            f"The API server at {server} refused the kubeconfig's credentials (401 Unauthorized); "
            "log in again or pick another context."
        )
    if error.code == 403:
        return ClusterError(f"Forbidden: {said}; ask your cluster admin for that permission.")
    return ClusterError(f"The API server at {server} answered {error.code} {error.reason}: {said}.")


def _reason(error: Exception) -> str:
    """The cause of a failed connection, in the system's words: "Connection refused"."""
    text = str(error)
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return "its TLS certificate was not trusted (certificate verify failed)"
    if isinstance(error, TimeoutError) or "timed out" in text.lower():
        return "timed out"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return _first_line(error)


def _first_line(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    return echoed_text.bounded(lines[0] if lines else type(error).__name__, 300).rstrip(".")
