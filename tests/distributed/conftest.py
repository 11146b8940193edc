"""Fixtures for the distributed tests: the local tasks and the single-process reference run."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import shared_data_dir
from tests.distributed import harness


@pytest.fixture(autouse=True)
def _datasets_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    """`job.main` in this process takes its include path as a tenant's, as a runner pod does: the
    local tasks' data_files (the shared benchmark files) must be inside the datasets directory."""
    monkeypatch.setenv("ASSAY_DATASETS_DIR", str(shared_data_dir()))


@pytest.fixture(scope="session")
def task_dir(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return harness.write_tasks(tmp_path_factory.mktemp("dist_tasks"), shared_data)


@dataclass
class Reference:
    """One process's run of the standard spec: what every distributed run must reproduce."""

    results: dict[str, Any]
    samples: dict[str, list[dict[str, Any]]]
    computed: list[str]
    """Cache keys of every request the model computed, in order."""


def computed_keys(log_prefix: Path) -> dict[int, list[str]]:
    """Per rank, the request keys the test LM computed (see launch.py)."""
    out = {}
    for path in sorted(log_prefix.parent.glob(log_prefix.name + ".rank*")):
        out[int(path.name.rsplit("rank", 1)[1])] = path.read_text().split()
    return out


@pytest.fixture(scope="session")
def reference(task_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Reference:
    work = tmp_path_factory.mktemp("reference")
    spec = harness.spec_file(work / "spec.json")
    env = harness.base_env(ASSAY_TEST_CALL_LOG=str(work / "calls"))
    run = harness.launch(
        ["runner", "--spec", str(spec), "--include_path", str(task_dir), "--output-dir", str(work / "out")], env=env
    )
    assert run.returncode == 0, run.output
    results, samples = harness.read_outputs(work / "out")
    keys = computed_keys(work / "calls")
    assert list(keys) == [0]
    return Reference(results, samples, keys[0])
