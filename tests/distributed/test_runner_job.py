"""The runner Job's entry point in one process: spec in, files and status out, exit codes.

No torchrun here (these run in-process and fast); the multi-process behaviour is in the
other modules of this folder.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

import tests.distributed.launch  # noqa: F401 - registers the test LM as "assay-test"
from assay import spec as spec_module
from assay.runner import distributed, job, spec_file
from tests.conftest import shared_data_dir
from tests.distributed import harness


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "RANK",
        "WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        spec_module.ENV_SPEC_FILE,
        spec_module.ENV_NAME,
        spec_module.ENV_NAMESPACE,
        spec_module.ENV_OUTPUT_DIR,
        spec_module.ENV_STATUS_FILE,
    ):
        monkeypatch.delenv(name, raising=False)
    for name in [n for n in __import__("os").environ if n.startswith("ASSAY_TEST_")]:
        monkeypatch.delenv(name)


def _spec(tmp_path: Path, **fields: object) -> Path:
    return harness.spec_file(tmp_path / "spec.json", **fields)


def test_without_torchrun_init_is_a_no_op() -> None:
    assert distributed.init_from_env() is False
    assert distributed.rank_and_world() == (0, 1)
    assert distributed.gather_to_rank0("x") == ["x"]
    distributed.barrier("nothing to wait for")


def test_check_accepts_a_valid_spec_and_rejects_an_unknown_task(
    task_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert job.main(["--check", "--spec", str(_spec(tmp_path)), "--include_path", str(task_dir)]) == 0
    bad = _spec(tmp_path, tasks=["d_arcc"])
    assert job.main(["--check", "--spec", str(bad), "--include_path", str(task_dir)]) == job.EXIT_CONFIG == 78
    err = capsys.readouterr().err
    assert "Unknown task 'd_arcc'" in err and "Traceback" not in err


def test_a_missing_or_malformed_spec_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert job.main([]) == job.EXIT_CONFIG
    assert "set ASSAY_EVALUATION_FILE" in capsys.readouterr().err
    # The spec itself in the environment, as before it moved to a file: not read.
    monkeypatch.setenv("ASSAY_EVALUATION", json.dumps({"model": "assay-test", "tasks": ["d_arc"]}))
    assert job.main(["--check"]) == job.EXIT_CONFIG
    assert "No Evaluation spec" in capsys.readouterr().err
    monkeypatch.setenv(spec_module.ENV_SPEC_FILE, str(tmp_path / "absent.json"))  # its ConfigMap not mounted
    assert job.main(["--check"]) == job.EXIT_CONFIG
    err = capsys.readouterr().err
    assert f"Cannot read the Evaluation spec ASSAY_EVALUATION_FILE={tmp_path / 'absent.json'} (No such file" in err
    assert "Traceback" not in err and err.count("\n") == 1
    spec_file = tmp_path / "evaluation.json"
    monkeypatch.setenv(spec_module.ENV_SPEC_FILE, str(spec_file))
    spec_file.write_text("{not json")
    assert job.main(["--check"]) == job.EXIT_CONFIG
    assert f"{spec_file} is not valid JSON" in capsys.readouterr().err
    spec_file.write_bytes(b"\xff\xfe")
    assert job.main(["--check"]) == job.EXIT_CONFIG
    assert f"{spec_file} is not valid JSON" in capsys.readouterr().err
    spec_file.write_text(json.dumps({"model": "assay-test", "tasks": ["d_arc"], "modelArgz": {}}))
    assert job.main(["--check"]) == job.EXIT_CONFIG
    assert "modelArgs" in capsys.readouterr().err


def test_the_spec_file_is_read_whole_however_large(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Over 128 KiB, the most Linux lets one environment variable hold: a long `samples` list.
    samples = {"d_arc": list(range(40_000))}
    path = tmp_path / "evaluation.json"
    path.write_text(spec_module.parse_spec({"model": "assay-test", "tasks": ["d_arc"], "samples": samples}).to_json())
    assert path.stat().st_size > 200 * 1024
    monkeypatch.setenv(spec_module.ENV_SPEC_FILE, str(path))
    spec = spec_file.load_spec()
    assert spec.samples == {"d_arc": tuple(range(40_000))}
    # --spec FILE still takes precedence.
    other = harness.spec_file(tmp_path / "other.json", tasks=["d_lambada"])
    assert spec_file.load_spec(str(other)).tasks == ("d_lambada",)


def test_run_writes_results_samples_and_status(task_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec_file = tmp_path / "evaluation.json"
    spec_file.write_text(
        json.dumps({"model": "assay-test", "tasks": ["d_lambada", "d_gsm"], "limit": 3, "logSamples": True})
    )
    monkeypatch.setenv(spec_module.ENV_SPEC_FILE, str(spec_file))
    monkeypatch.setenv(spec_module.ENV_OUTPUT_DIR, str(tmp_path / "out"))
    monkeypatch.setenv(spec_module.ENV_STATUS_FILE, str(tmp_path / "status.json"))
    assert job.main(["--include_path", str(task_dir)]) == 0
    results, samples = harness.read_outputs(tmp_path / "out")
    assert set(results["results"]) == {"d_lambada", "d_gsm"} and "samples" not in results
    assert {task: len(rows) for task, rows in samples.items()} == {"d_lambada": 3, "d_gsm": 6}  # two filters
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["progress"]["requestsDone"] == status["progress"]["requestsTotal"] > 0
    assert status["results"]["d_lambada"]["acc,none"]["value"] == results["results"]["d_lambada"]["acc,none"]


def test_failures_map_to_exit_codes_and_reach_the_status(
    task_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(spec_module.ENV_STATUS_FILE, str(tmp_path / "status.json"))
    missing = tmp_path / "missing_data"
    missing.mkdir()
    # A tenant's data_files are read inside the datasets directory only.
    monkeypatch.setenv("ASSAY_DATASETS_DIR", f"{tmp_path}:{shared_data_dir()}")
    (missing / "t.yaml").write_text(
        f"task: d_missing\ndataset_path: json\ndataset_kwargs: {{data_files: {{test: {missing / 'nope.jsonl'}}}}}\n"
        "test_split: test\noutput_type: loglikelihood\ndoc_to_text: '{{text}}'\ndoc_to_target: ' x'\n"
    )
    spec = _spec(tmp_path, tasks=["d_missing"])
    assert job.main(["--spec", str(spec), "--include_path", str(missing)]) == job.EXIT_MODEL_OR_DATA == 3
    message = json.loads((tmp_path / "status.json").read_text())["message"]
    assert "could not be loaded" in message and "nope.jsonl" in message

    monkeypatch.setenv("ASSAY_TEST_FAIL_RANK", "0")
    monkeypatch.setenv("ASSAY_TEST_FAIL_MODE", "raise")
    monkeypatch.setenv("ASSAY_TEST_FAIL_AT", "loglikelihood")
    assert job.main(["--spec", str(_spec(tmp_path)), "--include_path", str(task_dir)]) == job.EXIT_FAILURE
    assert (
        json.loads((tmp_path / "status.json").read_text())["message"]
        == "RuntimeError: injected failure in loglikelihood"
    )


def test_progress_goes_to_the_sink_every_time_and_to_the_log_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reports: list[tuple[int, int]] = []

    class Sink:  # the sink decides what it writes (tests/results/test_status_sink.py)
        def progress(self, done: int, total: int) -> None:
            reports.append((done, total))

    now = [0.0]
    reporter = job.ProgressReporter(Sink(), interval_s=5, clock=lambda: now[0])
    steps = ((1, 0.0), (2, 1.0), (3, 4.9), (4, 5.5), (5, 6.0), (10, 6.1))
    with caplog.at_level(logging.INFO, logger=job.log.name):
        for done, at in steps:
            now[0] = at
            reporter(done, 10)
    assert reports == [(done, 10) for done, _ in steps]
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("progress:")]
    assert logged == ["progress: 1 of 10 requests", "progress: 4 of 10 requests", "progress: 10 of 10 requests"]
