"""The project's images (deploy/images), built for real with podman and checked as a
cluster would run them: uid 1000, read-only root filesystem, no capabilities, tmpfs /tmp.

Needs podman and debootstrap (.ci/run installs them): outside CI their absence skips these
tests with the reason, under CI=true it fails them. The first build downloads torch's CUDA
wheels (several GB) into the wheelhouse under ~/.cache/assay/wheels; later builds reuse it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import tomllib
import yaml
from packaging.utils import canonicalize_name

from tests.e2e.cluster import images as image_builds

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
OPERATOR_LIMIT_BYTES = 400 * 1000 * 1000
"""The operator image's size budget, uncompressed (podman's MB are 10^6 bytes)."""
RESTRICTED = [
    "--read-only",
    "--cap-drop=ALL",
    "--security-opt=no-new-privileges",
    "--user",
    "1000:1000",
    "--tmpfs",
    "/tmp:rw,size=256m",
    "--network",
    "none",
]


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def built() -> dict[str, str]:
    missing = image_builds.missing_tools(("podman", "debootstrap"))
    if missing:
        _skip_or_fail(
            f"{', '.join(missing)} not installed (apt-get install podman debootstrap); the image tests need them"
        )
    try:
        return image_builds.build_images(image_builds.ensure_base_image())
    except image_builds.ImagesUnavailable as reason:
        _skip_or_fail(str(reason))
        raise


def _run(image: str, *command: str, entrypoint: str | None = None) -> subprocess.CompletedProcess[str]:
    args = ["podman", "run", "--rm", *RESTRICTED]
    if entrypoint:
        args += ["--entrypoint", entrypoint]
    result = subprocess.run([*args, image, *command], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{' '.join(command)} in {image} failed: {result.stderr.strip()[-2000:]}"
    return result


def _inspect(image: str) -> dict:
    out = subprocess.run(["podman", "image", "inspect", image], capture_output=True, text=True, check=True).stdout
    return json.loads(out)[0]


def test_tags_carry_the_package_version(built: dict[str, str]) -> None:
    assert built == {
        "operator": f"{image_builds.DEFAULT_REPO}/assay-operator:{VERSION}",
        "runner": f"{image_builds.DEFAULT_REPO}/assay-runner:{VERSION}",
    }


def test_oci_labels_and_user(built: dict[str, str]) -> None:
    for target, tag in built.items():
        config = _inspect(tag)["Config"]
        labels = config["Labels"]
        assert labels["org.opencontainers.image.version"] == VERSION
        assert labels["org.opencontainers.image.title"] == f"assay-{target}"
        assert labels["org.opencontainers.image.source"].startswith("https://")
        assert labels.get("org.opencontainers.image.revision"), "build.sh labels the git revision"
        assert config["User"] == "1000:1000" and config["Entrypoint"] == ["assay"]
        assert "HOME=/tmp" in config["Env"] and "PYTHONDONTWRITEBYTECODE=1" in config["Env"]


def test_operator_image_has_no_torch_and_runs_restricted(built: dict[str, str]) -> None:
    image = built["operator"]
    assert "assay operator" in _run(image, "operator", "--help").stdout
    probe = (
        "import importlib.util as u, os, sys\n"
        "import assay.operator.main, assay.operator.handlers\n"
        "from assay.operator.admission import validation\n"
        "validation.resolve_tasks(['arc_easy', 'mmlu'])\n"  # the task library ships in the operator too
        "print(os.getuid(), os.getgid(), [m for m in ('torch', 'transformers', 'datasets', 'accelerate') if u.find_spec(m)])\n"
    )
    assert _run(image, "-c", probe, entrypoint="python").stdout.split() == ["1000", "1000", "[]"]
    # /metrics' self-signed certificate is made at start with the image's openssl, as uid 1000 on a
    # read-only root (in /tmp), and loads as the server's.
    made = "from assay.operator.runtime import metrics_tls\nprint(metrics_tls.self_signed().cert.stat().st_size > 0)\n"
    assert _run(image, "-c", made, entrypoint="python").stdout.split()[-1] == "True"


def test_runner_image_imports_the_engine_restricted(built: dict[str, str]) -> None:
    probe = (
        "import os, torch, transformers, datasets, assay.runner, assay.runner.job\n"
        "from assay.runner.tasks.index import TaskManager\n"
        "TaskManager().match_tasks(['arc_easy'])\n"
        "open('/tmp/probe', 'w').write('ok')\n"
        "try:\n    open('/opt/assay/probe', 'w')\nexcept OSError as e:\n    print('rofs', e.errno)\n"
        "print(os.getuid(), torch.__version__.split('+')[0] > '2')\n"
    )
    out = _run(built["runner"], "-c", probe, entrypoint="python").stdout.split()
    assert out[:2] == ["rofs", "30"] and out[2:] == ["1000", "True"], out  # 30 = EROFS
    assert "usage" in _run(built["runner"], "run", "--help").stdout.lower()


def test_sbom_base_and_lock(built: dict[str, str]) -> None:
    """Each image carries the CycloneDX SBOM build.sh exported and labelled, listing exactly
    what its lock installed, and names its base by digest."""
    from tests.project.image_locks import lock

    for target, tag in built.items():
        labels = _inspect(tag)["Config"]["Labels"]
        assert re.fullmatch(r"\S+@sha256:[0-9a-f]{64}", labels["org.opencontainers.image.base.name"]), labels
        probe = "import os, sys; print(os.path.exists('/opt/sbom-tool')); sys.stdout.write(open(sys.argv[1]).read())"
        output = _run(tag, "-c", probe, "/opt/assay/share/sbom.cdx.json", entrypoint="python").stdout
        tool, inside = output.split("\n", 1)
        assert tool == "False", f"the SBOM tool's venv ships in {tag}"
        exported = REPO / "dist" / f"assay-{target}-{VERSION}.cdx.json"
        assert exported.read_text() == inside, f"{exported} is not the SBOM inside {tag}"
        assert labels["dev.assay.sbom.sha256"] == hashlib.sha256(exported.read_bytes()).hexdigest()
        sbom = json.loads(inside)
        assert sbom["bomFormat"] == "CycloneDX" and sbom["metadata"]["component"]["name"] == "assay"
        listed = {canonicalize_name(c["name"]): c["version"] for c in sbom["components"]}
        pinned = {name: version for name, (version, _) in lock(f"{target}.lock.txt").items()}
        assert {n: listed.get(n) for n in pinned} == pinned, f"{tag}'s venv differs from {target}.lock.txt"
        assert set(listed) - set(pinned) <= {"pip"}, set(listed) - set(pinned)  # the runner keeps the venv's pip


def test_image_sizes(built: dict[str, str]) -> None:
    sizes = {target: int(_inspect(tag)["Size"]) for target, tag in built.items()}
    print({target: f"{size / 1e6:.0f} MB" for target, size in sizes.items()})
    assert sizes["operator"] < OPERATOR_LIMIT_BYTES, f"operator image is {sizes['operator'] / 1e6:.0f} MB"


def test_chart_defaults_name_these_images(built: dict[str, str]) -> None:
    chart = REPO / "deploy" / "helm" / "assay"
    values = yaml.safe_load((chart / "values.yaml").read_text())
    app_version = yaml.safe_load((chart / "Chart.yaml").read_text())["appVersion"]
    assert app_version == VERSION
    assert f"{values['image']['repository']}:{values['image']['tag'] or app_version}" == built["operator"]
    runner = values["runnerImage"]
    assert f"{runner['repository']}:{runner['tag'] or app_version}" == built["runner"]
    from assay.operator.build.runner_images import DEFAULT_IMAGE, DEFAULT_VLLM_IMAGE

    assert DEFAULT_IMAGE == built["runner"]
    vllm = values["runnerVllmImage"]  # built by test_vllm_image.py under its CPU tag
    assert (
        DEFAULT_VLLM_IMAGE
        == f"{vllm['repository']}:{vllm['tag'] or app_version}"
        == built["runner"].replace("/assay-runner:", "/assay-runner-vllm:")
    )
