"""The README's offline smoke run, executed as written (paths made absolute), and the code layout
in docs/development.md."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _smoke_block() -> str:
    text = (REPO / "README.md").read_text()
    start = text.index("A complete offline smoke run")
    block = re.search(r"```bash\n(.*?)```", text[start:], re.S)
    assert block is not None
    return block.group(1)


@pytest.mark.slow
def test_readme_offline_smoke_run(shared_data: Path, tmp_path: Path) -> None:
    script = _smoke_block()
    script = script.replace("../shared/data", str(shared_data)).replace("examples/", f"{REPO}/examples/")
    script = script.replace("python ", f"{sys.executable} ")
    run = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"\|arc_easy\s*\|", run.stdout), run.stdout
    assert "phase: Succeeded" in run.stdout
    assert list((tmp_path / "out").glob("*/results_*.json"))


def test_readme_layout_names_every_package_and_only_real_paths() -> None:
    text = (REPO / "docs" / "development.md").read_text()
    block = re.search(r"## Layout\n.*?```\n(.*?)```", text, re.S)
    assert block is not None
    listed: set[str] = set()
    parent = ""
    for line in block.group(1).splitlines():
        names = [part.strip() for part in line[:30].split(",") if part.strip()]
        nested = line.startswith("  ")
        for name in names:  # (a description's continuation line has no name column)
            listed.add((f"{parent}{name}" if nested else name).rstrip("/"))
            if not nested:
                parent = name
    for path in listed:
        assert (REPO / path).exists(), f"docs/development.md's layout names {path}, which does not exist"
    packages = {str(p.parent.relative_to(REPO)) for p in (REPO / "assay").rglob("*/__init__.py")}
    assert packages <= listed, f"docs/development.md's layout leaves out {sorted(packages - listed)}"
