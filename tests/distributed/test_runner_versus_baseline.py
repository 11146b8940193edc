"""A runner Job compared with its baseline: `job.main` in one process with the test LM, reporting
to a local HTTP server that answers as the API server does (tests/status_api.py), through the
product's own client (assay.kube).

Every run writes `scores_` files beside its results (identity and metric values only); a
run whose spec names a baseline (a path on the output volume, or an Evaluation whose status
says where its results are) writes `status.comparison` with its scores; a baseline it cannot
use is one sentence there, and the run's own scores land all the same.
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
from assay.runner import job
from tests.distributed import harness
from tests.distributed.baseline_runs import (  # noqa: F401 - fixtures
    TASK,
    api_server,
    comparison_status,
    plain_environment,
    scores_file,
)
from tests.status_api import ApiServer

LIMIT = 40


def _run(task_dir: Path, tmp_path: Path, folder: str, monkeypatch: pytest.MonkeyPatch, **fields: Any) -> int:
    monkeypatch.setenv(spec_module.ENV_OUTPUT_DIR, str(tmp_path / "volume" / folder))
    spec = harness.spec_file(
        tmp_path / f"{folder.replace('/', '_')}.json",
        tasks=[TASK],
        limit=LIMIT,
        logSamples=False,
        output={"pvc": "results"},
        **fields,
    )
    return job.main(["--spec", str(spec), "--include_path", str(task_dir)])


def test_every_run_writes_scores_and_a_run_against_itself_is_unchanged(
    api_server: ApiServer, task_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _run(task_dir, tmp_path, "base", monkeypatch) == 0
    lines = [json.loads(line) for line in scores_file(tmp_path / "volume" / "base").read_text().splitlines()]
    assert len(lines) == LIMIT and not list((tmp_path / "volume" / "base").glob("**/samples_*.jsonl"))
    assert set(lines[0]) == {"doc_id", "doc_hash", "prompt_hash", "filter", "metrics", *lines[0]["metrics"]}
    assert "comparison" not in api_server.object["status"]  # no baseline, no comparison

    assert _run(task_dir, tmp_path, "again", monkeypatch, baseline={"path": "base"}) == 0
    comparison = comparison_status(api_server)
    assert comparison["baseline"] == "path:base" and comparison["verdict"] == "unchanged", comparison
    assert "notes" not in comparison  # the same prompts: the in-memory run carries the facts its file will
    acc = next(row for row in comparison["rows"] if row["metric"] == "acc")
    assert acc["n"] == LIMIT and acc["delta"] == 0.0 and acc["pValue"] == 1.0 and acc["test"] == "mcnemar"
    spec = {"baseline": {"path": "base"}}
    assert regression.regressed(api_server.object["status"], spec, succeeded=True)["Regressed"][:2] == (
        False,
        "NoRegression",
    )


def test_a_crafted_better_baseline_is_a_regression_and_a_strict_gate_fails_an_inconclusive_one(
    api_server: ApiServer, task_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _run(task_dir, tmp_path, "base", monkeypatch) == 0
    # The same documents, every one answered right: a baseline this run must fall short of.
    shutil.copytree(tmp_path / "volume" / "base", tmp_path / "volume" / "perfect")
    path = scores_file(tmp_path / "volume" / "perfect")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({**line, "acc": 1}) + "\n" for line in lines))
    wrong = sum(1 for line in lines if line["acc"] == 0)
    assert wrong >= 10, "the test LM must miss enough documents for McNemar to tell"

    assert _run(task_dir, tmp_path, "worse", monkeypatch, baseline={"path": "perfect"}) == 0
    comparison = comparison_status(api_server)
    assert comparison["verdict"] == "regressed", comparison
    worst = comparison["rows"][0]
    assert (worst["task"], worst["metric"], worst["verdict"]) == (TASK, "acc", "regressed")
    assert worst["ciHigh"] < 0 and worst["delta"] == pytest.approx(-wrong / LIMIT)
    assert comparison["message"].startswith(f"Regressed against path:perfect: {TASK} acc ")
    assert api_server.object["status"]["results"][TASK]["acc,none"]["value"] is not None  # the scores landed too
    condition = regression.regressed(api_server.object["status"], {"baseline": {"path": "perfect"}}, succeeded=True)
    assert condition["Regressed"][:2] == (True, "Regressed")

    # A tolerance wider than the drop: no regression, and the interval says so.
    assert (
        _run(
            task_dir,
            tmp_path,
            "tolerated",
            monkeypatch,
            baseline={"path": "perfect"},
            gate={"maxDropFor": {f"{TASK}:acc": 1.0, TASK: 1.0}},
        )
        == 0
    )
    assert comparison_status(api_server)["verdict"] in ("unchanged", "inconclusive")


def test_a_baseline_evaluation_is_read_through_the_api(
    api_server: ApiServer, task_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _run(task_dir, tmp_path, "base/g1", monkeypatch) == 0
    base = {
        "metadata": {"name": "base"},
        "spec": {"output": {"pvc": "results"}},
        "status": {"phase": "Succeeded", "outputDir": "/output/base/g1"},
    }
    api_server.others["base"] = base
    assert _run(task_dir, tmp_path, "cand", monkeypatch, baseline={"evaluation": "base"}) == 0
    comparison = comparison_status(api_server)
    assert comparison["baseline"] == "base" and comparison["verdict"] == "unchanged", comparison
    assert comparison["baselineRun"].startswith(str(tmp_path / "volume" / "base" / "g1"))


@pytest.mark.parametrize(
    "case,sentence",
    [
        ("missing", "The baseline Evaluation base cannot be used: it does not exist."),
        (
            "running",
            "The baseline Evaluation base has not succeeded (it is Running); compare again with a re-run once it has.",
        ),
        (
            "other volume",
            "The baseline Evaluation base writes to the volume elsewhere, this one to results; set the same spec.output.pvc on both.",
        ),
        (
            "emptyDir",
            "The baseline Evaluation base wrote its results to an emptyDir, gone with its pod; give it spec.output.pvc and re-run it.",
        ),
    ],
)
def test_a_baseline_that_cannot_be_used_is_one_sentence_and_the_scores_still_land(
    api_server: ApiServer, task_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, sentence: str
) -> None:
    base: dict[str, Any] = {
        "spec": {"output": {"pvc": "results"}},
        "status": {"phase": "Succeeded", "outputDir": "/output/base"},
    }
    if case == "running":
        base["status"]["phase"] = "Running"
    elif case == "other volume":
        base["spec"]["output"]["pvc"] = "elsewhere"
    elif case == "emptyDir":
        base["spec"] = {}
    if case != "missing":
        api_server.others["base"] = base
    assert _run(task_dir, tmp_path, "cand", monkeypatch, baseline={"evaluation": "base"}) == 0
    status = api_server.object["status"]
    assert status["comparison"] == {"baseline": "base", "error": sentence}
    assert status["results"][TASK]["acc,none"]["value"] is not None
    condition = regression.regressed(status, {"baseline": {"evaluation": "base"}}, succeeded=True)
    assert condition["Regressed"] == (None, "BaselineUnavailable", sentence)


def test_a_missing_baseline_path_is_one_sentence(
    api_server: ApiServer, task_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _run(task_dir, tmp_path, "cand", monkeypatch, baseline={"path": "runs/none"}) == 0
    assert comparison_status(api_server) == {
        "baseline": "path:runs/none",
        "error": "spec.baseline.path runs/none does not exist on this run's output volume.",
    }


def test_a_comparison_that_fails_is_one_sentence_and_the_scores_still_land(
    api_server: ApiServer, task_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _run(task_dir, tmp_path, "base", monkeypatch) == 0
    # A baseline whose every log-likelihood is -1000: its perplexity, exp(1000), overflows a float.
    shutil.copytree(tmp_path / "volume" / "base", tmp_path / "volume" / "huge")
    path = scores_file(tmp_path / "volume" / "huge")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert all(isinstance(line["perplexity"], float) for line in lines)
    path.write_text("".join(json.dumps({**line, "perplexity": -1000.0}) + "\n" for line in lines))

    assert _run(task_dir, tmp_path, "cand", monkeypatch, baseline={"path": "huge"}) == 0
    status = api_server.object["status"]
    sentence = (
        "This run and the baseline path:huge could not be compared: the statistics failed on extreme values "
        "(OverflowError); a score is probably infinite or huge (a -inf log-likelihood?)."
    )
    assert comparison_status(api_server) == {"baseline": "path:huge", "error": sentence}
    assert status["results"][TASK]["acc,none"]["value"] is not None  # the run's own scores landed
    assert status["results"][TASK]["perplexity,none"]["value"] is not None
    condition = regression.regressed(status, {"baseline": {"path": "huge"}}, succeeded=True)
    assert condition["Regressed"] == (None, "BaselineUnavailable", sentence)
