"""The images install from lock files (deploy/images/*.lock.txt, written by lock.sh) with
`pip --require-hashes`: each lock must pin, with hashes, everything pyproject.toml asks of
its image, or the image silently lags pyproject.toml (or its build fails in hash mode).

Offline: the locks are read as text; their hashes are checked by pip at build time.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.project.image_locks import IMAGES, REPO, lock

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
# The platform the locks are resolved for (lock.sh): the base images' CPython 3.11 on x86_64 Linux.
TARGET = {
    "python_version": "3.11",
    "python_full_version": "3.11.2",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}


def _requirements_py() -> ModuleType:
    spec = importlib.util.spec_from_file_location("image_requirements", IMAGES / "requirements.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _assert_locked(wanted: list[str], name: str) -> None:
    pins = lock(name)
    for text in wanted:
        requirement = Requirement(text)
        if requirement.marker and not requirement.marker.evaluate(TARGET):
            continue
        key = canonicalize_name(requirement.name)
        assert key in pins, f"{requirement.name} (pyproject.toml) is not in {name}: run deploy/images/lock.sh"
        version, hashes = pins[key]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"{name} pins {requirement.name}=={version}, outside pyproject.toml's {requirement}: "
            "run deploy/images/lock.sh"
        )
        assert hashes >= 1, f"{name} has no sha256 hash for {requirement.name}"


@pytest.mark.parametrize(("name", "extra"), [("operator.lock.txt", "operator"), ("runner.lock.txt", "runner")])
def test_image_lock_pins_core_and_extra_with_hashes(name: str, extra: str) -> None:
    wanted = _requirements_py().requirements(PYPROJECT, [extra])
    assert len(wanted) > len(PYPROJECT["project"]["dependencies"])  # the extra's own, not only the core
    _assert_locked(wanted, name)


def test_build_and_sbom_tool_locks() -> None:
    _assert_locked(PYPROJECT["build-system"]["requires"], "build.lock.txt")
    tools = [line for line in (IMAGES / "sbom.in").read_text().splitlines() if line and not line.startswith("#")]
    assert [canonicalize_name(Requirement(t).name) for t in tools] == ["cyclonedx-bom"]
    _assert_locked(tools, "sbom.lock.txt")


def test_every_pin_carries_a_hash() -> None:
    """pip's hash mode refuses a lock with any entry unhashed: fail here, not in a build."""
    for path in sorted(IMAGES.glob("*.lock.txt")):
        unhashed = [name for name, (_, hashes) in lock(path.name).items() if hashes == 0]
        assert not unhashed, f"{path.name}: no hashes for {unhashed}"


def test_operator_lock_has_no_ml_stack_and_runner_has_pypi_torch() -> None:
    operator, runner = lock("operator.lock.txt"), lock("runner.lock.txt")
    assert not {"torch", "transformers", "datasets", "accelerate"} & operator.keys()
    assert "+" not in runner["torch"][0], "the runner's torch must be PyPI's build (CUDA on Linux), not a local variant"
    assert any(name.startswith("nvidia-") for name in runner), "PyPI's Linux torch brings its CUDA libraries"


def test_dockerfile_installs_python_packages_only_in_hash_mode() -> None:
    dockerfile = re.sub(r"\\\n", " ", (IMAGES / "Dockerfile").read_text())
    commands = re.findall(r"pip (?:download|install)[^&\n]*-r [^&\n]*", dockerfile)
    assert {Path(c.split("-r ")[-1].split()[0]).name for c in commands} == {
        "build.lock.txt",
        "sbom.lock.txt",
        "operator.lock.txt",
        "runner.lock.txt",
    }
    for command in commands:
        assert "--require-hashes" in command, command
        assert ("--only-binary :all:" if command.startswith("pip download") else "--no-index") in command, command
