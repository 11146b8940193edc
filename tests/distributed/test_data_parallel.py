"""Several ranks compute exactly what one process computes: metrics, stderrs, samples.

Real torchrun process trees with gloo on CPU; the model is the hash-defined test LM
(launch.py), so any difference comes from how work is split, gathered and reassembled.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from tests.distributed import harness
from tests.distributed.conftest import Reference, computed_keys

pytestmark = pytest.mark.distributed


def _runner_argv(spec: Path, task_dir: Path, out: Path) -> list[str]:
    return ["runner", "--spec", str(spec), "--include_path", str(task_dir), "--output-dir", str(out)]


def _assert_same_as_reference(out: Path, reference: Reference) -> None:
    results, samples = harness.read_outputs(out)
    assert harness.outcome(results) == harness.outcome(reference.results)
    assert samples == reference.samples
    assert set(samples) == {"d_arc", "d_boolq", "d_lambada", "d_rolling", "d_gsm"}


def _assert_work_split(calls: Path, reference: Reference, world: int) -> None:
    per_rank = computed_keys(calls)
    assert sorted(per_rank) == list(range(world))
    assert all(per_rank.values()), "every rank computes a share"
    combined = Counter(key for keys in per_rank.values() for key in keys)
    assert combined == Counter(reference.computed), "together the ranks compute each request exactly once"


def test_two_ranks_match_one_process(task_dir: Path, reference: Reference, tmp_path: Path) -> None:
    spec = harness.spec_file(tmp_path / "spec.json")
    env = harness.base_env(ASSAY_TEST_CALL_LOG=str(tmp_path / "calls"))
    run = harness.launch(_runner_argv(spec, task_dir, tmp_path / "out"), env=env, nproc=2)
    assert run.returncode == 0, run.output
    _assert_same_as_reference(tmp_path / "out", reference)
    _assert_work_split(tmp_path / "calls", reference, 2)
    assert len(re.findall(r"^\|d_group *\|", run.output, flags=re.M)) == 2, "rank 0 alone prints the two tables"


def test_two_nodes_match_one_process(task_dir: Path, reference: Reference, tmp_path: Path) -> None:
    spec = harness.spec_file(tmp_path / "spec.json")
    env = harness.base_env(ASSAY_TEST_CALL_LOG=str(tmp_path / "calls"))
    runs = harness.launch_two_nodes(_runner_argv(spec, task_dir, tmp_path / "out"), env=env)
    assert [r.returncode for r in runs] == [0, 0], "\n\n".join(r.output for r in runs)
    _assert_same_as_reference(tmp_path / "out", reference)
    _assert_work_split(tmp_path / "calls", reference, 2)


def test_cli_run_under_torchrun_prints_one_table(task_dir: Path, reference: Reference, tmp_path: Path) -> None:
    argv = [
        "run",
        "--model",
        harness.MODEL_NAME,
        "--model_args",
        "pretrained=assay-test-model",
        "--tasks",
        ",".join(harness.TASKS),
        "--include_path",
        str(task_dir),
        "--limit",
        "6",
        "--log_samples",
        "--output_path",
        str(tmp_path / "out"),
    ]
    env = harness.base_env(ASSAY_TEST_CALL_LOG=str(tmp_path / "calls"))
    run = harness.launch(argv, env=env, nproc=2)
    assert run.returncode == 0, run.output
    assert len(re.findall(r"^\|d_group *\|", run.output, flags=re.M)) == 2, run.output
    results, samples = harness.read_outputs(tmp_path / "out")
    for key in ("results", "groups", "n-samples", "configs", "versions", "n-shot", "higher_is_better", "task_hashes"):
        assert results[key] == reference.results[key], key
    assert samples == reference.samples
    _assert_work_split(tmp_path / "calls", reference, 2)
