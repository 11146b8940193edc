"""The release workflow: actionlint finds nothing in .github/workflows, and what it publishes is
what the chart names (images in values.yaml, the chart's version convention).

actionlint is built into ~/.cache/assay/bin by .ci/run; outside CI a machine without it skips
the lint with the reason, under CI=true its absence fails."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO / ".github" / "workflows"
RELEASE = WORKFLOWS / "release.yml"
CHART = REPO / "deploy" / "helm" / "assay"
ACTIONLINT_INSTALL = "go install github.com/rhysd/actionlint/cmd/actionlint@v1.7.12"


def _actionlint() -> str | None:
    for candidate in (shutil.which("actionlint"), Path.home() / ".cache/assay/bin/actionlint"):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    return None


def _release() -> dict[Any, Any]:
    return dict(yaml.safe_load(RELEASE.read_text()))


def test_actionlint_finds_nothing_in_the_workflows() -> None:
    assert ACTIONLINT_INSTALL.removeprefix("go install ") in (REPO / ".ci" / "run").read_text(), (
        "keep .ci/run's version"
    )
    actionlint = _actionlint()
    if actionlint is None:
        message = f"actionlint is not installed (.ci/run does it: GOBIN=~/.cache/assay/bin {ACTIONLINT_INSTALL})"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    workflows = sorted(str(p) for p in WORKFLOWS.glob("*.yml"))
    assert workflows
    run = subprocess.run([actionlint, "-no-color", *workflows], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_release_publishes_the_images_the_chart_names() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    named = {
        "operator": values["image"]["repository"],
        "runner": values["runnerImage"]["repository"],
        "runner-vllm": values["runnerVllmImage"]["repository"],
    }
    workflow = _release()
    matrix = workflow["jobs"]["images"]["strategy"]["matrix"]["include"]
    assert {entry["target"]: entry["image"] for entry in matrix} == named
    # build.sh tags <registry>/assay-<target>, so the registry the workflow pushes to must be the values' too
    assert {f"{workflow['env']['REGISTRY']}/assay-{target}" for target in named} == set(named.values())
    # the chart's default tags are its appVersion (values: tag ""), which the workflow sets to the tag's version
    assert values["image"]["tag"] == values["runnerImage"]["tag"] == values["runnerVllmImage"]["tag"] == ""
    assert workflow["env"]["CHARTS"] == "oci://ghcr.io/assay-dev/charts"


def test_the_release_version_is_the_projects_and_the_charts() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M)
    assert project is not None
    assert chart["version"] == chart["appVersion"] == project.group(1), (
        "Chart.yaml's version and appVersion follow pyproject.toml's: a tag vX.Y.Z releases all three"
    )
    steps = "\n".join(str(s.get("run", "")) for s in _release()["jobs"]["chart"]["steps"])
    assert '--version "$VERSION" --app-version "$VERSION"' in steps


def test_the_release_has_least_privilege_and_pinned_actions() -> None:
    workflow = _release()
    assert workflow["permissions"] == {}, "no default permissions: each job asks for its own"
    trigger = workflow[True] if True in workflow else workflow["on"]  # YAML 1.1 reads `on` as true
    assert trigger == {"push": {"tags": ["v*"]}}
    for name, job in workflow["jobs"].items():
        assert "permissions" in job, f"job {name} must state its permissions"
        writes = {scope for scope, level in job["permissions"].items() if level == "write"}
        assert writes <= {"packages", "id-token", "contents"}, name
        assert "contents" not in writes or name == "release", f"only the release job writes contents, not {name}"
        for step in job["steps"]:
            if "uses" in step:
                assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", step["uses"]), (
                    f"not pinned by commit: {step['uses']}"
                )


def _pin_step() -> str:
    (step,) = [
        s for s in _release()["jobs"]["chart"]["steps"] if s.get("name", "").startswith("Pin the chart's images")
    ]
    return str(step["run"])


def test_the_released_chart_deploys_the_images_it_pushed_by_digest(tmp_path: Path) -> None:
    """The chart job's pin step, run for real on a copy of the chart with the images job's digest files."""
    helm = shutil.which("helm") or str(Path.home() / ".cache/assay/bin/helm")
    if not Path(helm).is_file():
        pytest.skip("helm is not installed (.ci/run installs it into ~/.cache/assay/bin)")
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["digest"] == values["runnerImage"]["digest"] == values["runnerVllmImage"]["digest"] == ""
    steps = [s.get("name", s.get("uses", "")) for s in _release()["jobs"]["chart"]["steps"]]
    assert steps.index("Pin the chart's images to the digests just pushed") < steps.index(
        "Package, push and sign the chart"
    )
    shutil.copytree(CHART, tmp_path / "deploy" / "helm" / "assay")
    (tmp_path / "images").mkdir()
    digests = {}
    for n, target in enumerate(("operator", "runner", "runner-vllm")):
        digests[target] = "sha256:" + f"{n}" * 64
        (tmp_path / "images" / f"assay-{target}-1.2.3.digest").write_text(
            f"ghcr.io/assay-dev/assay-{target}@{digests[target]}\n"
        )
    env = {**os.environ, "REGISTRY": "ghcr.io/assay-dev", "VERSION": "1.2.3"}
    env["PATH"] = f"{Path(helm).parent}:{env['PATH']}"
    pinned = subprocess.run(["bash", "-e", "-c", _pin_step()], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert pinned.returncode == 0, pinned.stdout + pinned.stderr
    written = yaml.safe_load((tmp_path / "deploy/helm/assay/values.yaml").read_text())
    assert written["image"]["digest"] == digests["operator"]
    assert written["runnerImage"]["digest"] == digests["runner"]
    assert written["runnerVllmImage"]["digest"] == digests["runner-vllm"]
    rendered = subprocess.run(
        [helm, "template", "assay", str(tmp_path / "deploy/helm/assay")], capture_output=True, text=True, check=True
    ).stdout
    for target, digest in digests.items():
        assert f"ghcr.io/assay-dev/assay-{target}@{digest}" in rendered
    # A digest file that is not this image's stops the release before the chart is packaged.
    (tmp_path / "images" / "assay-runner-1.2.3.digest").write_text(f"docker.io/someone/else@{digests['runner']}\n")
    shutil.copy(CHART / "values.yaml", tmp_path / "deploy/helm/assay/values.yaml")
    refused = subprocess.run(["bash", "-e", "-c", _pin_step()], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert refused.returncode != 0 and "::error::images/assay-runner-1.2.3.digest holds" in refused.stdout
