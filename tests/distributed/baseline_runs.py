"""What the baseline-comparison runner tests share: a plain process environment (no torchrun
variables), a local API server standing in for the Evaluation's, and readers of a run's
scores file and of status.comparison checked against the CRD's schema."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from assay import spec as spec_module
from assay.runner.results import status_sink
from tests.status_api import ApiServer

TASK = "d_lambada"


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "RANK",
        "WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        spec_module.ENV_SPEC_FILE,
        spec_module.ENV_STATUS_FILE,
        spec_module.ENV_GENERATION,
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture()
def api_server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ApiServer]:
    """The runner pod's environment for Evaluation team/ev, its output volume at tmp_path/volume."""
    server = ApiServer(job_name="ev-g1")
    monkeypatch.setattr(status_sink, "_cluster_client", server.api)
    for name, value in (
        (spec_module.ENV_NAME, "ev"),
        (spec_module.ENV_NAMESPACE, "team"),
        (spec_module.ENV_JOB_NAME, "ev-g1"),
        (spec_module.ENV_OUTPUT_ROOT, str(tmp_path / "volume")),
        ("ASSAY_PROGRESS_INTERVAL", "0"),
    ):
        monkeypatch.setenv(name, value)
    yield server
    server.httpd.shutdown()


def scores_file(folder: Path) -> Path:
    (path,) = folder.glob(f"**/scores_{TASK}_*.jsonl")
    return path


def comparison_status(server: ApiServer) -> dict[str, Any]:
    """status.comparison, checked against the CRD's schema: the API server prunes what it does not declare."""
    comparison = dict(server.object["status"]["comparison"])
    declared = crd_comparison_schema()
    assert set(comparison) <= set(declared["properties"]), set(comparison) - set(declared["properties"])
    row_fields = declared["properties"]["rows"]["items"]["properties"]
    for row in comparison.get("rows", ()):
        assert set(row) == set(row_fields), set(row) ^ set(row_fields)
    return comparison


def crd_comparison_schema() -> dict[str, Any]:
    crd = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "deploy" / "crds" / "evaluations.assay.dev.yaml").read_text()
    )
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    return dict(status["properties"]["comparison"])
