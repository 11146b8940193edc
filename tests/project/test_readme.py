"""The README's offline smoke run, executed as written (paths made absolute), the offline step
of docs/quickstart.md and its one namespace and version, and the code layout in
docs/development.md. (The quickstart's cluster steps run in tests/e2e/test_quickstart.py.)"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.quickstart_doc import NAMESPACE, image_references, localized, quickstart_blocks

REPO = Path(__file__).resolve().parents[2]


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
    run = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"\|arc_easy\s*\|", run.stdout), run.stdout
    assert "phase: Succeeded" in run.stdout
    assert list((tmp_path / "out").glob("*/results_*.json"))


@pytest.mark.slow
def test_quickstart_prepare_step_makes_the_model_and_datasets(shared_data: Path, tmp_path: Path) -> None:
    script = localized(quickstart_blocks()["prepare"], shared_data=shared_data)
    run = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert (tmp_path / "tiny-gpt2" / "config.json").is_file()
    # the folders examples/evaluation.yaml's runner reads: /cache/datasets/<hub id>/...
    assert (tmp_path / "datasets" / "allenai" / "ai2_arc").is_dir(), run.stdout
    assert (tmp_path / "datasets" / "EleutherAI" / "lambada_openai").is_dir(), run.stdout


def test_quickstart_keeps_one_namespace_and_this_version() -> None:
    blocks = quickstart_blocks()
    assert {
        "build",
        "load-kind",
        "load-minikube",
        "load-k3d",
        "load-containerd",
        "install",
        "prepare",
        "volumes",
        "fill",
        "run",
        "clean-up",
    } <= set(blocks)
    readme = (REPO / "README.md").read_text()
    on_kubernetes = readme[readme.index("## On Kubernetes") :]
    readme_block = re.search(r"```bash\n(.*?)```", on_kubernetes, re.S)
    assert readme_block is not None
    lines = [line for text in [*blocks.values(), readme_block.group(1)] for line in text.splitlines()]
    for line in lines:
        if line.startswith("kubectl "):
            assert line.startswith(f"kubectl -n {NAMESPACE} "), f"not in the quickstart's namespace: {line}"
        if line.startswith("helm "):
            assert f"--namespace {NAMESPACE} --create-namespace" in line, line
        if line.startswith("assay ") and line.split()[1] in {"results", "get", "logs", "describe"}:
            assert f"-n {NAMESPACE}" in line, line
    version = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M)
    assert version is not None
    values = yaml.safe_load((REPO / "deploy" / "helm" / "assay" / "values.yaml").read_text())
    chart_images = {
        f"{values['image']['repository']}:{version.group(1)}",
        f"{values['runnerImage']['repository']}:{version.group(1)}",
    }
    named = {
        *image_references((REPO / "docs" / "quickstart.md").read_text()),
        *image_references((REPO / "examples" / "cache-loader.yaml").read_text()),
    }
    assert named == chart_images, (
        "docs/quickstart.md and examples/cache-loader.yaml must name the chart's images at this version"
    )
    assert set(image_references(blocks["build"])) == chart_images
    for load in ("load-kind", "load-minikube", "load-k3d", "load-containerd"):
        assert set(image_references(blocks[load])) == chart_images, load


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
