"""A sequential run (`assay run --stop-early`) on two ranks stops where one process stops.

Real torchrun process trees with gloo on CPU and the hash-defined test LM (launch.py): the
baseline is an ordinary one-process run. Against it the same model's every paired difference
is 0 and the gate stops non-inferior after a few chunks; against a crafted copy that answered
every document right (the test LM, about a quarter right, is then clearly worse) it stops
regressed. Two ranks score their shares of each chunk, rank 0 decides and broadcasts: the
same chunk, verdict and interval, the same documents and scores as one process. A rerun with
the response cache computes nothing again.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.distributed import harness
from tests.distributed.conftest import computed_keys

pytestmark = pytest.mark.distributed

TASK = "d_arc"
LIMIT = "400"


def _argv(task_dir: Path, out: Path, *extra: str) -> list[str]:
    return [
        "run",
        "--model",
        harness.MODEL_NAME,
        "--model_args",
        "pretrained=assay-test-model",
        "--tasks",
        TASK,
        "--include_path",
        str(task_dir),
        "--limit",
        LIMIT,
        "--log_samples",
        "--output_path",
        str(out),
        *extra,
    ]


def _entry(out: Path) -> tuple[dict, list[dict]]:
    results, samples = harness.read_outputs(out)
    return results, samples[TASK]


@pytest.fixture(scope="module")
def baseline(task_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ordinary one-process run of the task: what the candidates are compared with."""
    out = tmp_path_factory.mktemp("baseline")
    run = harness.launch(_argv(task_dir, out), env=harness.base_env())
    assert run.returncode == 0, run.output
    return out


def _without_timings(entry: dict) -> dict:
    """A task's stop (documents, looks, verdict, interval, saved documents) without its wall-time figures."""
    return {k: v for k, v in entry.items() if "seconds" not in k}


def test_two_ranks_stop_at_the_same_chunk_as_one(task_dir: Path, tmp_path: Path, baseline: Path) -> None:
    env = harness.base_env()
    gate = ("--stop-early", "--baseline", str(baseline), "--max-drop", "0.05")

    one = harness.launch(_argv(task_dir, tmp_path / "one", *gate), env=env)
    assert one.returncode == 0, one.output
    two_env = harness.base_env(ASSAY_TEST_CALL_LOG=str(tmp_path / "calls"))
    cache = tmp_path / "cache" / "responses"
    two = harness.launch(_argv(task_dir, tmp_path / "two", *gate, "--use_cache", str(cache)), env=two_env, nproc=2)
    assert two.returncode == 0, two.output

    one_results, one_samples = _entry(tmp_path / "one")
    two_results, two_samples = _entry(tmp_path / "two")
    stop = one_results["sequential"]["tasks"][TASK]
    assert stop["stopped"] == "non_inferior" and stop["documents"] < int(LIMIT) and stop["interval"]
    assert _without_timings(two_results["sequential"]["tasks"][TASK]) == _without_timings(stop)
    assert two_samples == one_samples, "the same documents, scored alike"
    assert two_results["results"] == one_results["results"]
    per_rank = computed_keys(tmp_path / "calls")
    assert sorted(per_rank) == [0, 1] and all(per_rank.values()), "both ranks scored a share of the chunks"
    computed = sum(len(keys) for keys in per_rank.values())

    # the same command again: the same order, every answer from the response cache
    again_env = harness.base_env(ASSAY_TEST_CALL_LOG=str(tmp_path / "again"))
    again = harness.launch(
        _argv(task_dir, tmp_path / "again_out", *gate, "--use_cache", str(cache)), env=again_env, nproc=2
    )
    assert again.returncode == 0, again.output
    assert sum(len(keys) for keys in computed_keys(tmp_path / "again").values()) == 0 < computed
    assert _entry(tmp_path / "again_out")[1] == one_samples


def test_two_ranks_stop_regressed_at_the_same_chunk_as_one(task_dir: Path, tmp_path: Path, baseline: Path) -> None:
    perfect = tmp_path / "perfect"
    shutil.copytree(baseline, perfect)
    (path,) = perfect.glob(f"**/samples_{TASK}_*.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({**line, "acc": 1.0, "acc_norm": 1.0}) + "\n" for line in lines))
    gate = ("--stop-early", "--baseline", str(perfect), "--max-drop", "0.05")

    runs = {
        "one": harness.launch(_argv(task_dir, tmp_path / "one", *gate), env=harness.base_env()),
        "two": harness.launch(_argv(task_dir, tmp_path / "two", *gate), env=harness.base_env(), nproc=2),
    }
    assert all(run.returncode == 0 for run in runs.values()), {name: run.output[-3000:] for name, run in runs.items()}
    (one_results, one_samples), (two_results, two_samples) = (_entry(tmp_path / name) for name in runs)
    stop = one_results["sequential"]["tasks"][TASK]
    assert stop["stopped"] == "regressed" and stop["documents"] < int(LIMIT), stop
    assert any(look["upper"] < -0.05 for look in stop["interval"]), stop
    assert _without_timings(two_results["sequential"]["tasks"][TASK]) == _without_timings(stop)
    assert len(two_samples) == stop["documents"] and two_samples == one_samples


def test_a_target_half_width_stops_each_task_at_that_precision(task_dir: Path, tmp_path: Path) -> None:
    run = harness.launch(
        _argv(task_dir, tmp_path / "out", "--stop-early", "--target-ci", "0.1"), env=harness.base_env(), nproc=2
    )
    assert run.returncode == 0, run.output
    results, samples = _entry(tmp_path / "out")
    stop = results["sequential"]["tasks"][TASK]
    assert stop["stopped"] == "precise" and stop["documents"] < int(LIMIT) and len(samples) == stop["documents"]
    for look in stop["interval"]:
        assert (look["upper"] - look["lower"]) / 2 <= 0.1
    assert json.dumps(results["sequential"]["target_ci_half_width"]) == "0.1"


def test_a_pooled_group_stops_at_the_same_chunk_on_two_ranks_as_on_one(task_dir: Path, tmp_path: Path) -> None:
    """d_group (d_arc and d_boolq, acc weighted by size) is one unit: one order over both tasks'
    documents, one gate; two ranks score their shares of each chunk and stop where one process does."""
    env = harness.base_env()
    argv = ["--tasks", "d_group"]

    def group_argv(out: Path, *extra: str) -> list[str]:
        found = _argv(task_dir, out, *extra)
        at = found.index("--tasks")
        return found[:at] + argv + found[at + 2 :]

    baseline = harness.launch(group_argv(tmp_path / "baseline"), env=env)
    assert baseline.returncode == 0, baseline.output
    gate = ("--stop-early", "--baseline", str(tmp_path / "baseline"), "--max-drop", "0.05")
    one = harness.launch(group_argv(tmp_path / "one", *gate), env=env)
    assert one.returncode == 0, one.output
    two = harness.launch(group_argv(tmp_path / "two", *gate), env=env, nproc=2)
    assert two.returncode == 0, two.output
    one_results, one_samples = harness.read_outputs(tmp_path / "one")
    two_results, two_samples = harness.read_outputs(tmp_path / "two")
    stop = one_results["sequential"]["groups"]["d_group"]
    assert stop["stopped"] == "non_inferior" and stop["documents"] < stop["total"] == 2 * int(LIMIT)
    assert stop["tasks"] == ["d_arc", "d_boolq"]
    assert {k: v for k, v in two_results["sequential"]["groups"]["d_group"].items() if "seconds" not in k} == {
        k: v for k, v in stop.items() if "seconds" not in k
    }
    for task in ("d_arc", "d_boolq"):
        entry = one_results["sequential"]["tasks"][task]
        assert entry["group"] == "d_group" and 0 < entry["documents"] < int(LIMIT)
        assert len(one_samples[task]) == entry["documents"]
    assert two_samples == one_samples, "the same documents, scored alike"
