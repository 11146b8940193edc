"""Tests share helpers through helper modules and fixtures, never by importing another test
module: a test module imported for its helper is collected twice over, and a renamed test
breaks an unrelated one."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _imported_modules(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return names


def test_no_test_module_imports_another_test_module() -> None:
    offenders = [
        f"{path.relative_to(TESTS.parent)} imports {module}"
        for path in sorted(TESTS.rglob("*.py"))
        for module in _imported_modules(path)
        if module.startswith("tests.") and module.rsplit(".", 1)[-1].startswith("test_")
    ]
    assert offenders == []


def test_the_check_sees_an_import_of_a_test_module(tmp_path: Path) -> None:
    sample = tmp_path / "test_sample.py"
    sample.write_text("from tests.e2e.test_hardening import refused\nimport tests.e2e.helpers\n")
    assert _imported_modules(sample) == ["tests.e2e.test_hardening", "tests.e2e.helpers"]
