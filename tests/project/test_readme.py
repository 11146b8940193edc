"""The README's first run, executed as written from a copy of the repository, the offline step
of docs/quickstart.md and its one namespace and version, and the code layout in
docs/development.md. (The quickstart's cluster steps run in tests/e2e/test_quickstart.py.)"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.quickstart_doc import NAMESPACE, image_references, localized, quickstart_blocks

REPO = Path(__file__).resolve().parents[2]


def first_run_block() -> str:
    """The README's first shell block: install and first run."""
    text = (REPO / "README.md").read_text()
    start = text.index("## First run")
    block = re.search(r"```bash\n(.*?)```", text[start:], re.S)
    assert block is not None
    return block.group(1)


def _copy_of_the_repository(to: Path) -> Path:
    """The files of this checkout that git tracks or would track (the working tree as a clone
    of it holds them), copied into `to`/assay, so that no `../shared` stands beside it."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    clone = to / "assay"
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():  # (a file deleted in the working tree but not yet in the index is skipped)
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, clone / name)
    return clone


@pytest.mark.slow
def test_the_readme_first_run_works_from_a_bare_copy_of_the_repository(tmp_path: Path) -> None:
    """The block as written, from a copy of the repository with nothing beside it and the hub off.

    Two things stand in for the network, and only those: the venv sees this interpreter's site
    packages (`--system-site-packages`, without the venv's own old setuptools), so pip finds
    every requirement already installed and runs with --no-index and without build isolation
    (PIP_NO_INDEX, PIP_NO_BUILD_ISOLATION); the README's own `pip install` lines still run, and
    the editable install is the copy's.
    """
    clone = _copy_of_the_repository(tmp_path)
    assert not (clone.parent / "shared").exists()
    script = first_run_block()
    assert script.startswith("python -m venv .venv"), script
    first, rest = script.split("\n", 1)
    first = first.replace("python -m venv .venv", f"{sys.executable} -m venv --system-site-packages .venv", 1)
    # Python < 3.12's venv puts its own old setuptools in, which would hide this interpreter's
    # (torch asks for a newer one, and without the index pip cannot fetch it).
    own_setuptools = "if compgen -G '.venv/lib/python*/site-packages/setuptools' >/dev/null; then python -m pip uninstall -q -y setuptools; fi"
    script = f"{first}\n{own_setuptools}\n{rest}"
    env = {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}/usr/bin:/bin",
        "HOME": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf-home"),  # an empty cache: nothing downloaded earlier helps
        "PIP_NO_INDEX": "1",
        "PIP_NO_BUILD_ISOLATION": "0",  # (pip reads this variable inverted: 0 turns isolation off)
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    run = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert re.search(r"^\|arc_easy\s*\|\s*1\|none\s*\|\s*0\|acc\s*\|", run.stdout, re.M), run.stdout
    assert re.search(r"^\|lambada_openai\s*\|", run.stdout, re.M), run.stdout
    [results] = (clone / "out" / "tiny-gpt2").glob("results_*.json")
    assert json.loads(results.read_text())["n-samples"]["arc_easy"] == {"original": 40, "effective": 20}
    installed = subprocess.run(
        [str(clone / ".venv" / "bin" / "python"), "-c", "import assay; print(assay.__file__)"],
        cwd=clone / "out",  # (from tmp_path, the copy's folder itself would import as a namespace package)
        capture_output=True,
        text=True,
        check=True,
    )
    assert installed.stdout.strip() == str(clone / "assay" / "__init__.py"), "the venv's assay is not the copy's"


@pytest.mark.slow
def test_quickstart_prepare_step_makes_the_model_and_datasets(tmp_path: Path) -> None:
    # From the repository alone: no benchmark files from outside it.
    script = localized(quickstart_blocks()["prepare"])
    assert "examples/sample-data" in script and "shared" not in script
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}  # `python -m assay`: this checkout's
    run = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert (tmp_path / "tiny-gpt2" / "config.json").is_file()
    # the folders examples/evaluation.yaml's runner reads: /cache/datasets/<hub id>/...
    assert (tmp_path / "datasets" / "allenai" / "ai2_arc").is_dir(), run.stdout
    assert (tmp_path / "datasets" / "EleutherAI" / "lambada_openai").is_dir(), run.stdout


def test_quickstart_keeps_one_namespace_and_this_version() -> None:
    blocks = quickstart_blocks()
    assert {
        "cluster-kind",
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


def test_the_readme_shows_pictures_that_exist_and_says_what_made_them() -> None:
    readme = (REPO / "README.md").read_text()
    images = re.findall(r"!\[[^\]]+\]\(([^)]+)\)", readme)
    assert {"docs/images/forest.svg", "docs/images/dashboard.svg"} <= set(images)
    for image in images:
        assert (REPO / image).is_file(), image
    # Each picture names the script that regenerates it, and that script exists.
    for script in ("bench/forest_example.py", "bench/dashboard_image.py"):
        assert f"python {script}" in readme and (REPO / script).is_file(), script
    assert "```mermaid" in readme
    assert "not a Grafana screenshot" in (REPO / "docs" / "images" / "dashboard.svg").read_text()


def _fenced_blocks(text: str) -> list[tuple[str, list[str]]]:
    """(language, lines) of each fenced block, fences paired in order."""
    blocks: list[tuple[str, list[str]]] = []
    current: tuple[str, list[str]] | None = None
    for line in text.splitlines():
        if line.startswith("```"):
            if current is None:
                current = (line[3:].strip(), [])
            else:
                blocks.append(current)
                current = None
        elif current is not None:
            current[1].append(line)
    return blocks


@pytest.mark.parametrize("page", ["README.md", "docs/quickstart.md"])
def test_command_blocks_hold_no_placeholder_that_a_shell_would_read_as_a_redirection(page: str) -> None:
    # `--tasks <task or path/to/task.yaml>` pasted as is reads a file named "task" into the command.
    blocks = [lines for language, lines in _fenced_blocks((REPO / page).read_text()) if language in ("bash", "sh")]
    assert blocks
    for line in (line for lines in blocks for line in lines):
        command = line.split("  #", 1)[0]  # (a comment may say anything)
        assert not re.search(r"<[A-Za-z][^>]*>", command), f"{page}: a placeholder in a command: {line}"
