"""`assay --version`: the version, and the commit of the checkout it runs from.

A copy of the package in a fresh git repository stands for a checkout, so the commit, the
uncommitted-changes note and the no-git case are each known to the test, not read back from
the code under test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import assay

REPO_ROOT = Path(__file__).resolve().parents[2]


def _git(root: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True, env=env).stdout


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """This checkout's package and pyproject.toml in a folder of their own, not yet a repository."""
    root = tmp_path / "checkout"
    shutil.copytree(REPO_ROOT / "assay", root / "assay", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / "pyproject.toml", root)
    return root


def _version(root: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [sys.executable, "-m", "assay", "--version"], capture_output=True, text=True, cwd=cwd, env=env, timeout=60
    )


def test_a_checkout_prints_its_commit_and_whether_it_has_changes(copy: Path, tmp_path: Path) -> None:
    _git(copy, "init", "-q")
    _git(copy, "add", "-A")
    _git(copy, "commit", "-qm", "x")
    commit = _git(copy, "rev-parse", "HEAD").strip()
    # Run from another folder (itself no repository): the commit is the checkout's, not the cwd's.
    done = _version(copy, cwd=tmp_path)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout == f"assay {assay.__version__} (commit {commit[:12]}, {copy})\n"

    with (copy / "assay" / "errors.py").open("a", encoding="utf-8") as tracked:
        tracked.write("# changed\n")
    done = _version(copy, cwd=tmp_path)
    assert done.stdout == f"assay {assay.__version__} (commit {commit[:12]}, uncommitted changes, {copy})\n"


def test_without_git_history_it_prints_the_version_alone(copy: Path, tmp_path: Path) -> None:
    done = _version(copy, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, f"assay {assay.__version__}\n"), done.stderr


def test_the_version_is_pyprojects() -> None:
    import tomllib

    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert assay.__version__ == pyproject["project"]["version"]
