"""Where the API server is and who the client is to it: the pod's service account, or a kubeconfig.

Read here rather than by the kubernetes package, which no part of Assay imports. The same
sources in the same order: in a pod, the service account (KUBERNETES_SERVICE_HOST/PORT, its
token, CA and namespace); elsewhere a kubeconfig ($KUBECONFIG, its files merged as kubectl
merges them, else ~/.kube/config), its current context or the one named.

From a kubeconfig: the context's namespace; the cluster's server, CA (file or data),
tls-server-name, insecure-skip-tls-verify and proxy-url (http:// only); the user's token or
tokenFile, client certificate and key (files or data), an exec plugin (ExecCredential: a
token, re-run when it expires, or a client certificate), username and password, or an
auth-provider's stored token (kubectl dropped the gcp and azure auth-providers in 1.26; the
stored id-token or access-token is used as it is, never refreshed: when it has expired the
API server answers 401, and `kubectl` run once, or an exec plugin, gives a fresh one). A user
whose auth-provider stored no token is refused with one sentence naming it.

Tokens are read again on every `authorization()` call (the session asks every
`api_session.AUTH_REFRESH_SECONDS`): a projected service-account token is rotated on disk.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json
import os
import subprocess
import threading
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
EXEC_TIMEOUT = 60.0
"""Seconds an exec credential plugin may take (a cloud CLI asking its token service)."""


class ConfigError(Exception):
    """No usable credentials: not in a pod, and no kubeconfig (or a broken one)."""


@dataclasses.dataclass(frozen=True)
class Credentials:
    server: str
    """https://host:port (a path prefix allowed), or http:// for a local test server."""
    ca_file: str | None = None
    ca_data: str | None = None
    """PEM text of the CA (a kubeconfig's certificate-authority-data, decoded)."""
    client_cert: tuple[bytes, bytes] | None = None
    """(certificate, key) PEM: a kubeconfig's client certificate, or an exec plugin's."""
    insecure: bool = False
    tls_server_name: str | None = None
    proxy: str | None = None
    """An http:// proxy to tunnel through (kubeconfig proxy-url, else $HTTPS_PROXY unless $NO_PROXY names the host)."""
    authorization: Callable[[], str | None] = lambda: None
    """The Authorization header's value now (a token read again, an exec plugin re-run once expired)."""
    namespace: str | None = None
    """The kubeconfig context's namespace, or the service account's; None when neither says."""


def load(kubeconfig: str | None = None) -> Credentials:
    """`kubeconfig` when given; else the pod's service account, else $KUBECONFIG or ~/.kube/config."""
    if kubeconfig is not None:
        return from_kubeconfig([Path(kubeconfig)])
    try:
        return in_cluster()
    except ConfigError:
        paths = [Path(p).expanduser() for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
        return from_kubeconfig(paths or [Path("~/.kube/config").expanduser()])


def in_cluster(environ: Mapping[str, str] = os.environ, account: Path = SERVICE_ACCOUNT) -> Credentials:
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ConfigError("not in a pod: KUBERNETES_SERVICE_HOST/PORT are not set")
    token, ca = account / "token", account / "ca.crt"
    if not token.is_file() or not ca.is_file() or not ca.read_text().strip():
        raise ConfigError(f"the service account's token or CA is missing under {account}")
    _read_token(token)  # a token that is there now
    server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    namespace = account / "namespace"
    return Credentials(
        server=server,
        ca_file=str(ca),
        proxy=_environment_proxy(server),
        authorization=lambda: f"Bearer {_read_token(token)}",
        namespace=(namespace.read_text().strip() or None) if namespace.is_file() else None,
    )


def _read_token(path: Path) -> str:
    token = path.read_text().strip()
    if not token:
        raise ConfigError(f"the token file {path} is empty")
    return token


def _merged(paths: list[Path]) -> tuple[str | None, dict[str, dict[str, tuple[dict[str, Any], Path]]]]:
    """kubectl's merge: the first file that sets current-context wins it, the first entry of a
    name wins it. Returns (current context, {section: {name: (entry, its file's directory)}}):
    relative paths in an entry start from its own file's directory."""
    current: str | None = None
    named: dict[str, dict[str, tuple[dict[str, Any], Path]]] = {"clusters": {}, "users": {}, "contexts": {}}
    for path in paths:
        try:
            config = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as error:
            raise ConfigError(f"cannot read kubeconfig {path}: {error}") from None
        if not isinstance(config, dict):
            raise ConfigError(f"kubeconfig {path} is not a mapping")
        current = current or config.get("current-context") or None
        for section, entries in named.items():
            for item in config.get(section) or ():
                entries.setdefault(item["name"], (item.get(section[:-1]) or {}, path.resolve().parent))
    return current, named


def from_kubeconfig(paths: list[Path], *, context: str | None = None) -> Credentials:
    """The kubeconfig files `paths`, merged, as their current context (or `context`) says."""
    current, named = _merged(paths)
    chosen = context or current
    if not chosen:
        raise ConfigError(
            f"kubeconfig {os.pathsep.join(map(str, paths))} has no current-context: "
            "choose one with kubectl config use-context NAME"
        )
    try:
        entry, _ = named["contexts"][chosen]
        cluster, cluster_dir = named["clusters"][entry["cluster"]]
    except KeyError as missing:
        which = f"context {chosen!r}, its cluster" if context else "current context, its cluster"
        raise ConfigError(f"kubeconfig {os.pathsep.join(map(str, paths))} has no {missing} ({which})") from None
    user_name = str(entry.get("user") or "")
    user, user_dir = named["users"].get(user_name, ({}, cluster_dir))
    server = str(cluster.get("server") or "").rstrip("/")
    if not server:
        raise ConfigError(f"the kubeconfig's cluster {entry['cluster']!r} names no server")
    authorization, exec_cert = _authorization(user_name, user, user_dir)
    ca_data = cluster.get("certificate-authority-data")
    return Credentials(
        server=server,
        ca_file=_path(cluster.get("certificate-authority"), cluster_dir),
        ca_data=base64.b64decode(ca_data).decode() if ca_data else None,
        client_cert=exec_cert or _client_cert(user, user_dir),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        tls_server_name=cluster.get("tls-server-name") or None,
        proxy=cluster.get("proxy-url") or _environment_proxy(server),
        authorization=authorization,
        namespace=entry.get("namespace") or None,
    )


def _path(value: str | None, base: Path) -> str | None:
    return str(base / Path(value).expanduser()) if value else None


def _file_or_data(user: dict[str, Any], key: str, base: Path) -> bytes | None:
    if user.get(f"{key}-data"):
        return base64.b64decode(user[f"{key}-data"])
    path = _path(user.get(key), base)
    return Path(path).read_bytes() if path else None


def _client_cert(user: dict[str, Any], base: Path) -> tuple[bytes, bytes] | None:
    cert, key = _file_or_data(user, "client-certificate", base), _file_or_data(user, "client-key", base)
    return (cert, key) if cert and key else None


def _authorization(
    name: str, user: dict[str, Any], base: Path
) -> tuple[Callable[[], str | None], tuple[bytes, bytes] | None]:
    """The kubernetes package's order: an auth-provider's token, token or tokenFile, exec, username and password."""
    provider = user.get("auth-provider") or {}
    stored = (provider.get("config") or {}).get("id-token") or (provider.get("config") or {}).get("access-token")
    if stored:
        return (lambda: f"Bearer {stored}"), None
    if provider and not any(user.get(key) for key in ("token", "tokenFile", "exec", "username")):
        raise ConfigError(
            f"the kubeconfig's user {name!r} uses the {provider.get('name') or 'unnamed'} auth-provider with no "
            "stored token, and Assay runs no auth-provider plugin: give the user an exec credential plugin "
            "(gke-gcloud-auth-plugin, kubelogin) or a token"
        )
    if user.get("token"):
        token = str(user["token"])
        return (lambda: f"Bearer {token}"), None
    if user.get("tokenFile"):
        token_file = Path(_path(user["tokenFile"], base) or "")
        return (lambda: f"Bearer {_read_token(token_file)}"), None
    if user.get("exec"):
        plugin = ExecPlugin(user["exec"], base)
        return plugin.authorization, plugin.client_cert()
    if user.get("username") and user.get("password"):
        basic = base64.b64encode(f"{user['username']}:{user['password']}".encode()).decode()
        return (lambda: f"Basic {basic}"), None
    return (lambda: None), None


def _environment_proxy(server: str) -> str | None:
    """$HTTPS_PROXY (or $HTTP_PROXY for an http:// server, or $ALL_PROXY), unless $NO_PROXY names the host."""
    scheme, _, rest = server.partition("://")
    host = rest.split("/", 1)[0]
    if urllib.request.proxy_bypass(host):  # on Linux: $NO_PROXY
        return None
    proxies = urllib.request.getproxies_environment()
    return proxies.get(scheme) or proxies.get("all")


class ExecPlugin:
    """A kubeconfig's `exec` credential plugin (client.authentication.k8s.io ExecCredential), run
    again once the credential it gave expires."""

    def __init__(self, spec: dict[str, Any], base: Path) -> None:
        command = str(spec.get("command") or "")
        if not command:
            raise ConfigError("the kubeconfig's exec plugin names no command")
        if "/" in command and not Path(command).is_absolute():
            command = str(base / command)  # relative to the kubeconfig, as kubectl resolves it
        self.argv = [command, *map(str, spec.get("args") or ())]
        self.env = {**os.environ, **{e["name"]: str(e["value"]) for e in spec.get("env") or ()}}
        self.env["KUBERNETES_EXEC_INFO"] = json.dumps(
            {
                "apiVersion": spec.get("apiVersion") or "client.authentication.k8s.io/v1",
                "kind": "ExecCredential",
                "spec": {"interactive": False},
            }
        )
        self._lock = threading.Lock()
        self._status: dict[str, Any] = {}
        self._expires: datetime.datetime | None = None

    def _run(self) -> dict[str, Any]:
        try:
            done = subprocess.run(
                self.argv,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=EXEC_TIMEOUT,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise ConfigError(f"the kubeconfig's exec plugin {self.argv[0]} did not run: {error}") from None
        if done.returncode != 0:
            raise ConfigError(
                f"the kubeconfig's exec plugin {self.argv[0]} exited {done.returncode}: {done.stderr.strip()[-500:]}"
            )
        try:
            status: dict[str, Any] = json.loads(done.stdout)["status"]
        except (ValueError, KeyError, TypeError):
            raise ConfigError(f"the kubeconfig's exec plugin {self.argv[0]} gave no ExecCredential status") from None
        return status

    def _current(self) -> dict[str, Any]:
        with self._lock:
            now = datetime.datetime.now(datetime.timezone.utc)
            if not self._status or (self._expires is not None and self._expires <= now):
                self._status = self._run()
                expires = self._status.get("expirationTimestamp")
                self._expires = datetime.datetime.fromisoformat(expires.replace("Z", "+00:00")) if expires else None
            return self._status

    def authorization(self) -> str | None:
        token = self._current().get("token")
        return f"Bearer {token}" if token else None

    def client_cert(self) -> tuple[bytes, bytes] | None:
        status = self._current()
        if status.get("clientCertificateData") and status.get("clientKeyData"):
            return status["clientCertificateData"].encode(), status["clientKeyData"].encode()
        return None
