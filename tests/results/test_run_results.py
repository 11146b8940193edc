"""`RunResults`: lm-eval's results dict reads into the record and renders back key for key.

The results JSONs under tests/compare/runs were written by `assay run` and by lm-eval 0.4.13
itself (with and without groups); each must survive the round trip byte for byte, so that a
consumer handed the record sees what lm-eval's dict says.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assay.run_results import ABSENT, RunResults

RUNS = Path(__file__).resolve().parents[1] / "compare" / "runs"
RESULTS_FILES = sorted(RUNS.glob("*/*/results_*.json"))


@pytest.mark.parametrize("path", RESULTS_FILES, ids=lambda path: path.parent.parent.name)
def test_a_results_json_renders_back_byte_for_byte(path: Path) -> None:
    results = json.loads(path.read_text())
    run = RunResults.from_lmeval_dict(results)
    assert json.dumps(run.to_lmeval_dict(), indent=2) == json.dumps(results, indent=2)
    assert RunResults.from_lmeval_dict(run.to_lmeval_dict()) == run


def test_the_files_cover_lm_eval_and_assay_with_groups() -> None:
    names = {path.parent.parent.name for path in RESULTS_FILES}
    assert {"lmeval_seed7", "group_lmeval_seed7", "assay_0shot", "group_assay_0shot"} <= names


def test_one_task_is_one_record() -> None:
    results = {
        "results": {
            "t": {"name": "t", "alias": "t", "sample_len": 4, "acc,none": 0.5, "acc_stderr,none": "N/A"},
            "g": {
                "alias": "g",
                "name": "g",
                "sample_len": 4,
                "acc,none": 0.5,
                "acc_stderr,none": 0.1,
                "sample_count": {"acc,none": 4},
            },
        },
        "groups": {
            "g": {
                "alias": "g",
                "name": "g",
                "sample_len": 4,
                "acc,none": 0.5,
                "acc_stderr,none": 0.1,
                "sample_count": {"acc,none": 4},
            }
        },
        "group_subtasks": {"g": ["t"]},
        "configs": {"t": {"task": "t", "num_fewshot": 2}},
        "versions": {"g": None, "t": 1.0},
        "n-shot": {"t": 2},
        "higher_is_better": {"g": {"acc": True}, "t": {"acc": True}},
        "n-samples": {"t": {"original": 10, "effective": 4}},
        "samples": {"t": [{"doc_id": 0}]},
        "config": {"model": "dummy"},
        "git_hash": None,
        "date": 1.0,
    }
    run = RunResults.from_lmeval_dict(results)
    task, group = run.tasks["t"], run.tasks["g"]
    assert task.config == {"task": "t", "num_fewshot": 2} and task.version == 1.0 and task.n_shot == 2
    assert task.scores is not None and task.scores.find("acc", "none").stderr is None  # type: ignore[union-attr]
    assert task.n_samples == {"original": 10, "effective": 4} and task.samples == ({"doc_id": 0},)
    assert group.version is None and group.n_shot is ABSENT and group.config is None
    assert group.scores is not None and group.scores.find("acc", "none").sample_count == 4  # type: ignore[union-attr]
    assert run.groups == ("g",) and run.group_subtasks == {"g": ("t",)}
    assert run.config == {"model": "dummy"} and run.run_info == {"git_hash": None, "date": 1.0}
    assert run.to_lmeval_dict() == results
    assert "samples" not in run.to_lmeval_dict(samples=False) and run.without_samples().samples_by_task() == {}


def test_a_sparse_dict_reads_leniently() -> None:
    run = RunResults.from_lmeval_dict(
        {
            "results": {"t": {"acc,none": 1}},
            "groups": {"g": {"acc,none": 0.5}},
            "versions": {"v": 2},
            "configs": {"t": "not a mapping"},
        }
    )
    assert run.results_names() == ["t"] and run.groups == ("g",) and not run.tasks["g"].in_results
    assert run.tasks["v"].scores is None and run.tasks["v"].version == 2 and run.tasks["t"].version is ABSENT
    assert run.config_of("t") == {} and run.config_of("missing") == {} and run.config is None
