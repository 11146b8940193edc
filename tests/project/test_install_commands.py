"""Every "needs the 'X' extra" sentence prints a pip command that installs X from this checkout.

The package index has no `assay` distribution, so `pip install 'assay[hf]'` fails for a user
("No matching distribution found") or, worse, installs another project's package. The extras
named are collected from the source (every needs_extra / require_installed / install_sentence
call), so a new message cannot skip the check.

The command is run as printed (split as a shell would) by the pip of a fresh venv that sees
this interpreter's packages, with `--dry-run --no-index --no-build-isolation`: pip must resolve
the requirement to this checkout, as a project that provides the extra, and the extra's whole
dependency set to what is installed, without reaching the index (for vLLM, not installed here,
the checkout alone: `--no-deps`). Nothing is downloaded (tests/project/test_extras.py installs
extras into fresh venvs from the index).
The old sentence fails here: `assay[hf]` with --no-index is either not found or, in a dev venv,
"already satisfied" by whatever `assay` is installed, and the report then installs nothing.
"""

from __future__ import annotations

import ast
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from assay import extras

REPO_ROOT = Path(__file__).resolve().parents[2]
_CALLS = {"needs_extra", "require_installed", "install_sentence"}


def _backend_extras() -> set[str]:
    from assay.runner.models import _BACKEND_EXTRA

    return {extra for extra, _ in _BACKEND_EXTRA.values()}


# Files that pass the extra from a table rather than as a literal, and where that table is.
_TABLES = {"assay/runner/models/__init__.py": _backend_extras}


def _extras_named_in_source() -> set[str]:
    """The `extra` argument (the second positional one) of every call that prints the sentence."""
    named: set[str] = set()
    for path in (REPO_ROOT / "assay").rglob("*.py"):
        relative = path.relative_to(REPO_ROOT).as_posix()
        if relative == "assay/extras.py":
            continue
        if relative in _TABLES:
            named |= _TABLES[relative]()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name in _CALLS and len(node.args) >= 2:
                extra = node.args[1]
                if relative in _TABLES:
                    continue
                assert isinstance(extra, ast.Constant) and isinstance(extra.value, str), (
                    f"{path}:{node.lineno}: the extra is not a literal, so this test cannot check its command"
                )
                named.add(extra.value)
    return named


def _declared_extras() -> set[str]:
    import tomllib

    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return set(pyproject["project"]["optional-dependencies"])


def test_the_source_names_only_extras_that_pyproject_declares() -> None:
    named = _extras_named_in_source()
    assert {"hf", "vllm", "operator", "data", "metrics", "wandb", "hub", "api"} <= named
    assert named <= _declared_extras()


def test_the_sentence_names_this_checkout_by_path_when_run_from_it() -> None:
    assert extras.checkout() == REPO_ROOT
    sentence = extras.install_sentence("--model hf", "hf")
    assert sentence == f"--model hf needs the 'hf' extra: pip install -e {shlex.quote(f'{REPO_ROOT}[hf]')}."


# Extras whose dependencies this machine does not hold: pip cannot resolve them without the
# index (vLLM is a GPU-sized download), so for these only the checkout itself is resolved.
_NOT_INSTALLED_HERE = {"vllm"}


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv that sees this interpreter's packages (`--system-site-packages`): the user's
    environment with the dependencies already in it, so pip resolves each extra fully without
    the index. No pip or setuptools of its own (the system's are seen), so none older shadows them."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(root)], check=True, timeout=120
    )
    return root / "bin" / "python"


def _dry_run(command: str, *, python: Path, cwd: Path, tmp_path: Path, deps: bool = True) -> dict[str, object]:
    """pip's report for `command` ("pip install ..." as printed), resolved without the index by
    the venv's pip; with `deps`, the extra's whole dependency set must resolve to what is installed."""
    words = shlex.split(command)
    assert words[:2] == ["pip", "install"], command
    report = tmp_path / "report.json"
    offline = ["--dry-run", "--no-index", "--no-build-isolation", "-q", "--report", str(report)]
    if not deps:
        offline.append("--no-deps")
    done = subprocess.run(
        [str(python), "-m", "pip", "install", *offline, *words[2:]],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        env={"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, f"{command!r} failed:\n{done.stderr}"
    # Only the checkout is to be installed: every dependency of the extra is already satisfied.
    [installed] = json.loads(report.read_text())["install"]
    assert isinstance(installed, dict)
    return installed


def _assert_installs_the_checkout_with(installed: dict[str, object], extra: str) -> None:
    metadata = installed["metadata"]
    assert isinstance(metadata, dict) and metadata["name"] == "assay"
    assert installed["requested_extras"] == [extra]
    assert extra in metadata["provides_extra"]
    download = installed["download_info"]
    assert isinstance(download, dict) and download["url"] == REPO_ROOT.as_uri()


@pytest.mark.slow  # pip prepares the checkout's metadata once per command: a few seconds each
@pytest.mark.parametrize("extra", sorted(_extras_named_in_source()))
def test_the_printed_command_installs_the_extra_from_the_checkout(extra: str, venv: Path, tmp_path: Path) -> None:
    # As printed from a checkout: by absolute path, so it works from any folder.
    command = extras.install_command(extra)
    installed = _dry_run(command, python=venv, cwd=tmp_path, tmp_path=tmp_path, deps=extra not in _NOT_INSTALLED_HERE)
    _assert_installs_the_checkout_with(installed, extra)


@pytest.mark.slow
def test_the_command_printed_by_an_installed_wheel_works_from_the_checkout(
    venv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A wheel's install knows no checkout: it says to run the command from the checkout's folder.
    monkeypatch.setattr(extras, "checkout", lambda: None)
    printed = extras.install_command("operator")
    prefix = "from the Assay checkout, "
    assert printed.startswith(prefix)
    _assert_installs_the_checkout_with(
        _dry_run(printed[len(prefix) :], python=venv, cwd=REPO_ROOT, tmp_path=tmp_path), "operator"
    )
