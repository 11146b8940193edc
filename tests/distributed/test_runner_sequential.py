"""A runner Job with `spec.gate.sequential`: `job.main` in one process with the test LM, reporting to
a local HTTP server that answers as the API server does (tests/status_api.py).

Against a crafted baseline that answered every document right, the run stops regressed after
its first chunk: status says so (`comparison.sequential`, `savedWork`), the condition Regressed
is True, and the comparison is made on the documents both runs have. Against itself it stops
non-inferior, Regressed False.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import tests.distributed.launch  # noqa: F401 - registers the test LM as "assay-test"
from assay import spec as spec_module
from assay.operator.decide import regression
from tests.distributed import harness
from tests.distributed.baseline_runs import (  # noqa: F401 - fixtures
    api_server,
    comparison_status,
    plain_environment,
    scores_file,
)
from tests.status_api import ApiServer

TASK = "d_lambada"
LIMIT = 320
CHUNK = 64


def _run(task_dir: Path, tmp_path: Path, folder: str, monkeypatch: pytest.MonkeyPatch, **fields: Any) -> int:
    from assay.runner import job

    monkeypatch.setenv(spec_module.ENV_OUTPUT_DIR, str(tmp_path / "volume" / folder))
    spec = harness.spec_file(
        tmp_path / f"{folder}.json", tasks=[TASK], limit=LIMIT, logSamples=False, output={"pvc": "results"}, **fields
    )
    return job.main(["--spec", str(spec), "--include_path", str(task_dir)])


def _status(server: ApiServer) -> dict[str, Any]:
    return dict(server.object["status"])


def test_a_sequential_gate_stops_regressed_and_non_inferior_and_status_says_so(
    api_server: ApiServer,
    task_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _run(task_dir, tmp_path, "base", monkeypatch) == 0
    shutil.copytree(tmp_path / "volume" / "base", tmp_path / "volume" / "perfect")
    path = scores_file(tmp_path / "volume" / "perfect")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({**line, "acc": 1}) + "\n" for line in lines))

    gate = {"sequential": True, "maxDrop": 0.05}
    assert _run(task_dir, tmp_path, "worse", monkeypatch, baseline={"path": "perfect"}, gate=gate) == 0
    comparison = comparison_status(api_server)
    [stop] = comparison["sequential"]["tasks"]
    assert stop["task"] == TASK and stop["stopped"] == "regressed" and stop["total"] == LIMIT
    assert stop["documents"] < LIMIT and stop["documents"] % CHUNK == 0 and stop["upper"] < -0.05
    status = _status(api_server)
    assert status["savedWork"]["documents"] == LIMIT - stop["documents"]
    assert status["savedWork"]["ofDocuments"] == LIMIT and status["savedWork"]["modelSeconds"] >= 0
    assert status["nSamples"][TASK] == {"original": 5153, "effective": stop["documents"]}
    assert comparison["verdict"] == "regressed", comparison
    acc = next(row for row in comparison["rows"] if row["metric"] == "acc")
    assert acc["n"] == stop["documents"], "compared on the documents both runs have"
    assert any("stopped early" in note for note in comparison["notes"])
    spec = {"baseline": {"path": "perfect"}, "gate": gate}
    assert regression.regressed(status, spec, succeeded=True)["Regressed"][:2] == (True, "Regressed")

    assert _run(task_dir, tmp_path, "same", monkeypatch, baseline={"path": "base"}, gate=gate) == 0
    comparison = comparison_status(api_server)
    [stop] = comparison["sequential"]["tasks"]
    assert stop["stopped"] == "non_inferior" and stop["documents"] < LIMIT and stop["lower"] >= -0.05
    spec = {"baseline": {"path": "base"}, "gate": gate}
    assert regression.regressed(_status(api_server), spec, succeeded=True)["Regressed"][:2] == (False, "NoRegression")


def test_a_baseline_that_cannot_be_found_scores_every_document(
    api_server: ApiServer,
    task_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gate = {"sequential": True}
    assert _run(task_dir, tmp_path, "lost", monkeypatch, baseline={"path": "nowhere"}, gate=gate) == 0
    status = _status(api_server)
    assert status["nSamples"][TASK]["effective"] == LIMIT
    assert status["savedWork"]["documents"] == 0
    assert "does not exist" in status["comparison"]["error"]
