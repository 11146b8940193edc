"""The runner reports its scores to status before it writes files, and fails without them.

`job.main` in one process with the test LM, reporting to a local HTTP server that applies
status patches as the API server does (tests/status_api.py), through the real kubernetes
client: refused scores are a failed run (exit 74) whose files are still written; a disk
that cannot take the files costs the files, not the scores; an output directory that
cannot be written fails the run before the model is asked anything.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tests.distributed.launch  # noqa: F401 - registers the test LM as "assay-test"
from assay import spec as spec_module
from assay.runner import job
from assay.runner.results import status_sink
from tests.distributed import harness
from tests.status_api import ApiServer


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
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
    for name in [n for n in __import__("os").environ if n.startswith("ASSAY_TEST_")]:
        monkeypatch.delenv(name)


@pytest.fixture()
def api_server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[ApiServer]:
    """The runner pod's environment, reporting to a local API server for Evaluation team/ev, Job ev-g1."""
    server = ApiServer(job_name="ev-g1")
    monkeypatch.setattr(status_sink, "_cluster_client", server.api)
    for name, value in (
        (spec_module.ENV_NAME, "ev"),
        (spec_module.ENV_NAMESPACE, "team"),
        (spec_module.ENV_JOB_NAME, "ev-g1"),
        (spec_module.ENV_OUTPUT_DIR, str(tmp_path / "out")),
        ("ASSAY_PROGRESS_INTERVAL", "0"),
    ):
        monkeypatch.setenv(name, value)
    yield server
    server.httpd.shutdown()


def _run(task_dir: Path, tmp_path: Path) -> int:
    spec = harness.spec_file(tmp_path / "spec.json", tasks=["d_lambada"], limit=3)
    return job.main(["--spec", str(spec), "--include_path", str(task_dir)])


def test_refused_scores_fail_the_run_and_the_files_are_still_written(
    api_server: ApiServer, task_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: Any
) -> None:
    api_server.refuse = 403  # the runner's RoleBinding was deleted mid-run
    assert _run(task_dir, tmp_path) == job.EXIT_RESULTS_NOT_RECORDED == spec_module.RESULTS_NOT_RECORDED_EXIT_CODE == 74
    results, _ = harness.read_outputs(tmp_path / "out")
    assert results["results"]["d_lambada"]["acc,none"] is not None
    err = capsys.readouterr().err
    assert "The scores could not be written to the Evaluation's status (HTTP 403 Forbidden" in err
    assert "Traceback" not in err
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(m.startswith(f"the scores did not reach status; they are only in {tmp_path / 'out'}") for m in said), (
        said
    )
    assert "results" not in api_server.object["status"]
    # The scores were the last word tried: a failure message would meet the same refusal (or outage).
    assert [op["path"] for op in api_server.patches[-1]][:2] == ["/status/jobName", "/status/results"]


def test_a_full_output_volume_costs_the_files_not_the_scores(
    api_server: ApiServer, task_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The results folder cannot be made (a file is in the way): a real OSError, as ENOSPC would be.
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "assay-test-model").write_text("in the way")
    assert _run(task_dir, tmp_path) == 0
    status = api_server.object["status"]
    assert status["results"]["d_lambada"]["acc,none"]["value"] is not None
    assert status["outputFiles"]["written"] is False
    assert status["outputFiles"]["message"].startswith(
        f"The results files could not be written under {tmp_path / 'out'}"
    )
    assert "d_lambada" in capsys.readouterr().out  # the table is printed as ever


def test_written_files_are_reported_after_the_scores(api_server: ApiServer, task_dir: Path, tmp_path: Path) -> None:
    assert _run(task_dir, tmp_path) == 0
    status = api_server.object["status"]
    assert status["results"]["d_lambada"] and status["outputFiles"]["written"] is True
    written = sorted((tmp_path / "out").glob("**/results_*.json"))
    assert status["outputFiles"]["message"] == f"Results written to {written[0]}."


def test_a_superseded_run_exits_cleanly_without_touching_the_newer_runs_status(
    api_server: ApiServer, task_dir: Path, tmp_path: Path
) -> None:
    api_server.object["status"] = {"jobName": "ev-g2"}  # the operator started a newer run
    assert _run(task_dir, tmp_path) == 0
    assert api_server.object["status"] == {"jobName": "ev-g2"}
    harness.read_outputs(tmp_path / "out")  # its files are on its own output volume


def test_an_unwritable_output_dir_fails_before_the_model_is_asked_anything(
    api_server: ApiServer,
    task_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "a_file").write_text("not a folder")
    monkeypatch.setenv(spec_module.ENV_OUTPUT_DIR, str(tmp_path / "a_file" / "out"))
    # Had the model been asked, this would end the run with another code (1).
    monkeypatch.setenv("ASSAY_TEST_FAIL_RANK", "0")
    monkeypatch.setenv("ASSAY_TEST_FAIL_AT", "loglikelihood")
    monkeypatch.setenv("ASSAY_TEST_FAIL_MODE", "raise")
    assert _run(task_dir, tmp_path) == job.EXIT_CONFIG
    err = capsys.readouterr().err
    assert f"Cannot write to the output directory {tmp_path / 'a_file' / 'out'} (Not a directory)" in err
    assert "Traceback" not in err
    assert api_server.object["status"]["runnerMessage"].startswith("Cannot write to the output directory")
    assert "progress" not in api_server.object["status"]


def test_a_runner_without_credentials_writes_its_files_and_fails(
    task_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_credentials() -> Any:
        raise RuntimeError("Service host/port is not set.")

    monkeypatch.setattr(status_sink, "_cluster_client", no_credentials)
    for name, value in (
        (spec_module.ENV_NAME, "ev"),
        (spec_module.ENV_NAMESPACE, "team"),
        (spec_module.ENV_OUTPUT_DIR, str(tmp_path / "out")),
    ):
        monkeypatch.setenv(name, value)
    assert _run(task_dir, tmp_path) == job.EXIT_RESULTS_NOT_RECORDED
    harness.read_outputs(tmp_path / "out")


def test_the_job_fails_at_once_on_the_exit_code_for_lost_scores() -> None:
    from assay.operator.build import failure_policy

    rules = failure_policy.pod_failure_policy()["rules"]
    matching = [r for r in rules if 74 in (r.get("onExitCodes") or {}).get("values", ())]
    assert matching == [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [74]}}]
    # A disrupted pod (preempted, drained) is retried whatever its exit code: that rule comes first.
    assert rules.index(matching[0]) > next(i for i, r in enumerate(rules) if "onPodConditions" in r)
    json.dumps(rules)
