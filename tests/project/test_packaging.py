"""The wheel's package list is written by hand (assay.tasks lives in tasks/): keep it whole."""

from __future__ import annotations

from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[2]


def test_every_package_under_assay_is_packaged() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    on_disk = {".".join(init.parent.relative_to(REPO).parts) for init in (REPO / "assay").rglob("__init__.py")}
    assert on_disk <= listed, sorted(on_disk - listed)
    assert config["package-dir"]["assay.tasks"] == "tasks" and "assay.tasks" in listed
    assert "**/*.yaml" in config["package-data"]["assay.tasks"]
