"""Where the API server is and who the operator is to it (`credentials`): the pod's service
account, or a kubeconfig as kubectl reads one. The e2e suite runs the operator in a pod
(the service account) and `tests/e2e/test_kube_calls.py` from the admin's kubeconfig."""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from assay.kube import credentials


def _kubeconfig(
    path: Path, *, user: dict[str, Any], cluster: dict[str, Any] | None = None, current: str | None = "c"
) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "k", "cluster": cluster or {"server": "https://k:6443/"}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }
    if current:
        config["current-context"] = current
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(autouse=True)
def no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
        "NO_PROXY",
        "no_proxy",
    ):
        monkeypatch.delenv(name, raising=False)


def test_in_a_pod_the_service_account_and_its_token_as_it_is_now(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("first\n")
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    found = credentials.in_cluster({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, tmp_path)
    assert (found.server, found.ca_file) == ("https://10.0.0.1:443", str(tmp_path / "ca.crt"))
    assert found.authorization() == "Bearer first"
    (tmp_path / "token").write_text("rotated")  # the kubelet rotates a projected token on disk
    assert found.authorization() == "Bearer rotated"
    ipv6 = credentials.in_cluster({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}, tmp_path)
    assert ipv6.server == "https://[fd00::1]:443"
    with pytest.raises(credentials.ConfigError, match="not in a pod"):
        credentials.in_cluster({}, tmp_path)
    (tmp_path / "token").write_text("")
    with pytest.raises(credentials.ConfigError, match="empty"):
        credentials.in_cluster({"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "1"}, tmp_path)


def test_a_kubeconfig_cluster_its_ca_and_a_token(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text("pem")
    path = _kubeconfig(
        tmp_path / "config",
        user={"token": "abc"},
        cluster={
            "server": "https://k:6443/",
            "certificate-authority": "ca.crt",
            "tls-server-name": "api",
            "insecure-skip-tls-verify": False,
            "proxy-url": "http://proxy:3128",
        },
    )
    found = credentials.from_kubeconfig([path])
    assert found.server == "https://k:6443" and found.ca_file == str(tmp_path / "ca.crt")  # relative to the file
    assert (found.tls_server_name, found.insecure, found.proxy) == ("api", False, "http://proxy:3128")
    assert found.authorization() == "Bearer abc" and found.client_cert is None


def test_a_token_file_is_read_again(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("one")
    found = credentials.from_kubeconfig([_kubeconfig(tmp_path / "config", user={"tokenFile": "token"})])
    assert found.authorization() == "Bearer one"
    (tmp_path / "token").write_text("two")
    assert found.authorization() == "Bearer two"


def test_client_certificates_from_data_or_files_and_basic_auth(tmp_path: Path) -> None:
    data = {
        "client-certificate-data": base64.b64encode(b"CERT").decode(),
        "client-key-data": base64.b64encode(b"KEY").decode(),
    }
    assert credentials.from_kubeconfig([_kubeconfig(tmp_path / "a", user=data)]).client_cert == (b"CERT", b"KEY")
    (tmp_path / "c.crt").write_bytes(b"C")
    (tmp_path / "c.key").write_bytes(b"K")
    files = credentials.from_kubeconfig(
        [_kubeconfig(tmp_path / "b", user={"client-certificate": "c.crt", "client-key": "c.key"})]
    )
    assert files.client_cert == (b"C", b"K") and files.authorization() is None
    basic = credentials.from_kubeconfig([_kubeconfig(tmp_path / "c", user={"username": "u", "password": "p"})])
    assert basic.authorization() == "Basic " + base64.b64encode(b"u:p").decode()
    ca = credentials.from_kubeconfig(
        [
            _kubeconfig(
                tmp_path / "d",
                user={},
                cluster={"server": "https://k", "certificate-authority-data": base64.b64encode(b"PEM").decode()},
            )
        ]
    )
    assert ca.ca_data == "PEM"


def test_an_exec_plugin_runs_again_once_its_token_expires(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    plugin = tmp_path / "plugin.py"
    plugin.write_text(f"""
import json, os, pathlib
runs = pathlib.Path({str(runs)!r})
n = len(runs.read_text()) + 1 if runs.exists() else 1
runs.write_text("x" * n)
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
expiry = "2000-01-01T00:00:00Z" if n == 1 else "2999-01-01T00:00:00Z"
print(json.dumps({{"apiVersion": info["apiVersion"], "kind": "ExecCredential",
                  "status": {{"token": os.environ["PREFIX"] + str(n), "expirationTimestamp": expiry}}}}))
""")
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(plugin)],
            "env": [{"name": "PREFIX", "value": "t"}],
        }
    }
    found = credentials.from_kubeconfig([_kubeconfig(tmp_path / "config", user=user)])
    # Run once at load (it may give a client certificate); that token had expired, so run again.
    assert found.authorization() == "Bearer t2"
    assert found.authorization() == "Bearer t2" and runs.read_text() == "xx"


def test_kubeconfig_files_merge_as_kubectl_merges_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _kubeconfig(tmp_path / "first", user={"token": "first"}, current=None)
    second = _kubeconfig(tmp_path / "second", user={"token": "second"}, cluster={"server": "https://other"})
    monkeypatch.setenv("KUBECONFIG", f"{first}:{second}")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "")  # not in a pod
    found = credentials.load()
    # The second file sets the current context; the first file's entries of each name win.
    assert (found.server, found.authorization()) == ("https://k:6443", "Bearer first")
    with pytest.raises(credentials.ConfigError, match="has no"):
        credentials.from_kubeconfig([first])  # no current context
    (tmp_path / "broken").write_text("{")
    with pytest.raises(credentials.ConfigError, match="cannot read kubeconfig"):
        credentials.load(str(tmp_path / "broken"))


def test_an_environment_proxy_unless_no_proxy_names_the_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _kubeconfig(tmp_path / "config", user={"token": "t"})
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    assert credentials.from_kubeconfig([path]).proxy == "http://proxy:3128"
    monkeypatch.setenv("NO_PROXY", "k,.cluster.local")
    assert credentials.from_kubeconfig([path]).proxy is None


def test_the_session_sends_the_authorization_the_credentials_give() -> None:
    from assay.kube import api_session

    session = api_session.Session(
        credentials.Credentials(server="http://127.0.0.1:1", authorization=lambda: "Bearer x")
    )
    assert session.auth_headers() == {"Authorization": "Bearer x"}
    assert api_session.Session(credentials.Credentials(server="http://127.0.0.1:1")).auth_headers() == {}
