"""docs/quickstart.md's cluster steps, run as written on the real node, so the page cannot rot.

The blocks come from the page itself (tests/quickstart_doc.py). What differs on this node,
and only that:
- the cluster: the suite's own control plane and node stand for the page's step 0 (`kind
  create cluster`, which is not run here).
- build and load: the suite has built the images (`images`, deploy/images/build.sh on its
  debootstrap base) and imported them into containerd (`node`), as the page's containerd
  block does; the test checks the page names exactly those images.
- install: the quickstart's namespace and release are the suite's (`operator` has installed
  them), so the page's `helm upgrade --install` is an upgrade; it gets the suite's `--set`s
  (chart_values) so the release the other tests share keeps its values.
- volumes: this cluster has no StorageClass, so the test makes two local PersistentVolumes
  bound in advance to the page's claims (as a provisioner would).
- the wait's timeout is shortened, so a failure shows in minutes.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from assay.operator.decide import run_phases
from tests.e2e.cluster import control_plane as cp
from tests.e2e.cluster.node import Node
from tests.e2e.conftest import (
    OPERATOR_NAMESPACE,
    RELEASE,
    Cluster,
    OperatorDeployment,
    _local_volume,
    chart_values,
    find_helm,
    give_to_runner,
)
from tests.quickstart_doc import NAMESPACE, image_references, localized, quickstart_blocks

pytestmark = pytest.mark.e2e

CLAIMS = {"assay-cache": "2Gi", "assay-results": "1Gi"}  # examples/volumes.yaml
EVALUATION = "tiny-gpt2-smoke"  # examples/evaluation.yaml


def _bash(script: str, *, cwd: Path, env: dict[str, str], timeout: float, check: bool = True) -> str:
    run = subprocess.run(
        ["bash", "-euxo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and run.returncode != 0:
        raise AssertionError(
            f"the quickstart step failed (exit {run.returncode}):\n{run.stdout[-4000:]}\n{run.stderr[-4000:]}"
        )
    return run.stdout


def _volume(claim: str, size: str, path: Path) -> dict[str, Any]:
    """A local PersistentVolume bound in advance to the quickstart's claim, of no StorageClass
    (the claim names none, and this cluster has no default), ReadWriteOnce as the claim asks."""
    volume = _local_volume(f"quickstart-{claim}", path, namespace=NAMESPACE, claim=claim)
    volume["spec"].update(storageClassName="", accessModes=["ReadWriteOnce"], capacity={"storage": size})
    return volume


def _forget(plane: cp.ControlPlane) -> None:
    """What the quickstart leaves in the shared namespace (a killed earlier run's too), and its volumes."""
    plane.kubectl(
        "-n",
        NAMESPACE,
        "delete",
        f"evaluation/{EVALUATION}",
        "pod/assay-cache-loader",
        *[f"pvc/{c}" for c in CLAIMS],
        "--ignore-not-found",
        "--timeout=120s",
        check=False,
        timeout=180,
    )
    plane.kubectl("delete", "pv", *[f"quickstart-{c}" for c in CLAIMS], "--ignore-not-found", check=False)


@pytest.fixture
def quickstart_volumes(control_plane: cp.ControlPlane, volumes: Path) -> Iterator[Path]:
    _forget(control_plane)
    root = volumes / "quickstart"
    shutil.rmtree(root, ignore_errors=True)
    for claim, size in CLAIMS.items():
        (root / claim).mkdir(parents=True)
        control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(_volume(claim, size, root / claim)))
    give_to_runner(root)
    yield root
    _forget(control_plane)


def test_the_quickstart_runs_as_written(
    control_plane: cp.ControlPlane,
    node: Node,
    images: dict[str, str],
    operator: OperatorDeployment,
    quickstart_volumes: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    blocks = quickstart_blocks()
    assert (NAMESPACE, "assay") == (OPERATOR_NAMESPACE, RELEASE), "the quickstart installs the suite's release"
    built = {images["operator"], images["runner"]}
    assert set(image_references(blocks["build"])) == built, "the page builds other images than the suite"
    assert set(image_references(blocks["load-containerd"])) == built
    assert "ctr -n k8s.io images import -" in blocks["load-containerd"]

    env = {
        **os.environ,
        "KUBECONFIG": str(control_plane.admin_kubeconfig),
        "PATH": f"{Path(find_helm()).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    cluster = Cluster(control_plane, operator, node, NAMESPACE, quickstart_volumes)

    transcript: list[str] = []

    def step(name: str, timeout: float = 300, **substitutions: str) -> str:
        started = time.monotonic()
        script = localized(blocks[name])  # the page's data is the repository's sample: nothing from outside it
        for old, new in substitutions.items():
            assert old in script, f"docs/quickstart.md's {name} block no longer has {old!r}"
            script = script.replace(old, new)
        try:
            out = _bash(script, cwd=tmp_path, env=env, timeout=timeout)
        except AssertionError as error:
            raise AssertionError(f"{error}\n{cluster.diagnostics()}") from None
        transcript.append(f"--- {name}: {time.monotonic() - started:.1f} s\n{script.strip()}\n{out.strip()}".rstrip())
        return out

    step("prepare")  # the tiny model and the datasets, in tmp_path
    step("install", **{"--wait": f"--wait {shlex.join(chart_values(images))}"})
    operator.wait_watching()  # an upgrade that changed the pod template restarts the operator
    step("volumes")
    step("fill", timeout=420)
    assert sorted(p.name for p in (quickstart_volumes / "assay-cache").iterdir()) == ["datasets", "models"]
    assert (quickstart_volumes / "assay-cache" / "models" / "tiny-gpt2" / "config.json").is_file()
    printed = step("run", timeout=420, **{"--timeout=15m": "--timeout=300s"})

    assert "|arc_easy" in printed and "|lambada_openai" in printed, printed
    status = cluster.evaluation(EVALUATION)["status"]
    assert status["phase"] == "Succeeded" and set(status["results"]) == {"arc_easy", "lambada_openai"}
    assert status["nSamples"]["arc_easy"]["effective"] == 8, status["nSamples"]  # limit: 8 in examples/evaluation.yaml
    assert list((quickstart_volumes / "assay-results").rglob("results_*.json")), "no results JSON on assay-results"
    transcript.append(_where_the_run_went(cluster.evaluation(EVALUATION)))
    step("clean-up", timeout=180)
    with capsys.disabled():  # the transcript, each step with its wall time, in the suite's output
        print("\nquickstart transcript (docs/quickstart.md on the e2e node):\n" + "\n".join(transcript))
    assert not [c for c in cluster.items("pvc") if c["metadata"]["name"] in CLAIMS], "the clean-up step left its claims"


def _where_the_run_went(evaluation: dict[str, Any]) -> str:
    """The run step's time by phase: created → the Job started, then the runner's cold path from its status."""
    status = evaluation["status"]
    created, started = (
        run_phases.parse_time(t) for t in (evaluation["metadata"]["creationTimestamp"], status["startTime"])
    )
    phases = run_phases.phase_seconds(status) or {}
    assert created is not None and started is not None, status
    return (
        f"    (the run: created → Job started {(started - created).total_seconds():.1f} s, "
        + ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in phases.items())
        + ")"
    )
