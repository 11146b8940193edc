"""kopf's login (`handlers.login` → `kopf_settings.connection_info`) is the operator's own
credentials (`assay.kube.credentials`): kopf's watches send the same Authorization the
operator's requests send, from the same service account or kubeconfig, read again at each
login. Real token and kubeconfig files in a temporary folder; kopf's own header and TLS
context built from what the login gives. The e2e suite runs the operator's watches on it."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from assay.kube import credentials
from assay.operator import kopf_settings

POD = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def _service_account(folder: Path, token: str) -> Path:
    (folder / "token").write_text(token)
    (folder / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    (folder / "namespace").write_text("assay-system")
    return folder


def test_in_a_pod_kopf_logs_in_with_the_service_accounts_token_as_it_is_now(tmp_path: Path) -> None:
    given = credentials.in_cluster(POD, _service_account(tmp_path, "first"))
    info = kopf_settings.connection_info(given)
    assert (info.server, info.ca_path, info.default_namespace) == (
        "https://10.0.0.1:443",
        str(tmp_path / "ca.crt"),
        "assay-system",
    )
    assert info.as_http_headers() == {"Authorization": "Bearer first"} == {"Authorization": given.authorization()}
    (tmp_path / "token").write_text("rotated")  # kopf logs in again on a 401: the rotated token
    assert kopf_settings.connection_info(given).as_http_headers() == {"Authorization": "Bearer rotated"}


def test_from_a_kubeconfig_kopf_sends_what_the_operator_sends(tmp_path: Path) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "basic",
        "clusters": [{"name": "k", "cluster": {"server": "https://k:6443", "insecure-skip-tls-verify": True}}],
        "users": [
            {"name": "basic", "user": {"username": "ada", "password": "s3:cret"}},
            {"name": "bearer", "user": {"token": "t0ken"}},
        ],
        "contexts": [
            {"name": "basic", "context": {"cluster": "k", "user": "basic", "namespace": "team"}},
            {"name": "bearer", "context": {"cluster": "k", "user": "bearer"}},
        ],
    }
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(config))
    for context in ("basic", "bearer"):
        given = credentials.from_kubeconfig([path], context=context)
        info = kopf_settings.connection_info(given)
        assert info.as_http_headers() == {"Authorization": given.authorization()}
        assert info.insecure and not info.as_ssl_context().check_hostname
    basic = kopf_settings.connection_info(credentials.from_kubeconfig([path]))
    assert (basic.username, basic.password, basic.default_namespace) == ("ada", "s3:cret", "team")
    assert base64.b64decode(basic.as_http_headers()["Authorization"].split()[1]) == b"ada:s3:cret"
