"""What `assay.kube.credentials` reads beyond the server and the user: the context a command
names (`--context`), the namespace a context or the service account gives, and the one
refusal, a user whose auth-provider stored no token. Real files in a temporary folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from assay.kube import credentials


def _kubeconfig(path: Path, *, users: dict[str, dict[str, Any]], current: str | None = "home") -> Path:
    """Two clusters; a context per user, named after it, in the namespace `ns-<user>`; `home` is the first."""
    names = list(users)
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "one", "cluster": {"server": "https://one:6443"}},
            {"name": "two", "cluster": {"server": "https://two:6443"}},
        ],
        "users": [{"name": name, "user": user} for name, user in users.items()],
        "contexts": [
            {"name": "home", "context": {"cluster": "one", "user": names[0]}},
            *({"name": name, "context": {"cluster": "two", "user": name, "namespace": f"ns-{name}"}} for name in names),
        ],
    }
    if current:
        config["current-context"] = current
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_named_context_gives_its_cluster_user_and_namespace(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "config", users={"alice": {"token": "a"}, "bob": {"token": "b"}})
    home = credentials.from_kubeconfig([path])
    assert (home.server, home.authorization(), home.namespace) == ("https://one:6443", "Bearer a", None)
    bob = credentials.from_kubeconfig([path], context="bob")
    assert (bob.server, bob.authorization(), bob.namespace) == ("https://two:6443", "Bearer b", "ns-bob")


def test_an_unknown_context_and_a_missing_current_context_are_said(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "config", users={"alice": {"token": "a"}})
    with pytest.raises(credentials.ConfigError, match=r"has no 'nope' \(context 'nope', its cluster\)$"):
        credentials.from_kubeconfig([path], context="nope")
    unset = _kubeconfig(tmp_path / "unset", users={"alice": {"token": "a"}}, current=None)
    with pytest.raises(credentials.ConfigError, match="has no current-context: choose one with kubectl config"):
        credentials.from_kubeconfig([unset])
    assert credentials.from_kubeconfig([unset], context="alice").namespace == "ns-alice"


def test_the_service_accounts_namespace_is_the_pods(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("t")
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    pod = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    assert credentials.in_cluster(pod, tmp_path).namespace is None
    (tmp_path / "namespace").write_text("team\n")
    assert credentials.in_cluster(pod, tmp_path).namespace == "team"


def test_an_auth_provider_token_is_used_as_stored_and_none_stored_is_refused_by_name(tmp_path: Path) -> None:
    stored = {"auth-provider": {"name": "oidc", "config": {"id-token": "eyJ.stored", "refresh-token": "r"}}}
    empty = {"auth-provider": {"name": "gcp", "config": {"cmd-path": "/usr/bin/gcloud"}}}
    path = _kubeconfig(tmp_path / "config", users={"stored": stored, "empty": empty})
    assert credentials.from_kubeconfig([path], context="stored").authorization() == "Bearer eyJ.stored"
    with pytest.raises(credentials.ConfigError) as refused:
        credentials.from_kubeconfig([path], context="empty")
    assert str(refused.value) == (
        "the kubeconfig's user 'empty' uses the gcp auth-provider with no stored token, and Assay runs no "
        "auth-provider plugin: give the user an exec credential plugin (gke-gcloud-auth-plugin, kubelogin) or a token"
    )
