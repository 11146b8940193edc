"""Only kube/ talks to the API server: the standard library's HTTP client and TLS stay there.

import-linter (pyproject.toml) keeps the kubernetes package and urllib3 out of assay/operator
altogether (assay.kube, which kube/ calls, is the product's one client), but it can name only top-level packages,
and `http` is http.server too (the standby's health endpoint in runtime/leader.py). So the
two standard-library modules are checked here by name.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

OPERATOR = Path(__file__).resolve().parents[2] / "assay" / "operator"
CLIENT_MODULES = ("http.client", "ssl")
SERVES_TLS = frozenset({"runtime/metrics_server.py", "runtime/metrics_tls.py"})
"""ssl to serve /metrics over TLS (and load its certificate): it answers scrapes and sends no request."""


def _imports(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def _is_client(name: str) -> bool:
    return any(name == module or name.startswith(f"{module}.") for module in CLIENT_MODULES)


def test_only_kube_imports_the_http_client_and_ssl() -> None:
    found: dict[str, list[str]] = {}
    for path in sorted(OPERATOR.rglob("*.py")):
        where = path.relative_to(OPERATOR).as_posix()
        if where.startswith("kube/"):
            continue
        for name in _imports(path):
            if _is_client(name) and not (name == "ssl" and where in SERVES_TLS):
                found.setdefault(where, []).append(name)
    assert not found, f"only assay/operator/kube/ may open connections to the API server: {found}"
    # The check sees what kube/ imports, so it would see the same elsewhere.
    assert {"http.client", "ssl"} <= set(_imports(OPERATOR.parent / "kube" / "api_session.py"))
