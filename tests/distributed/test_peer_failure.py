"""A rank that dies or hangs ends the whole run quickly, with a message naming it.

The test LM (launch.py) breaks on purpose on rank 1 when ASSAY_TEST_FAIL_* is set.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.distributed import harness

pytestmark = pytest.mark.distributed

BOUND_S = 150  # far above the seconds these runs take on a loaded 2-core machine, far below a hang (1800 s)


def _argv(tmp_path: Path, task_dir: Path) -> list[str]:
    spec = harness.spec_file(tmp_path / "spec.json")
    return ["runner", "--spec", str(spec), "--include_path", str(task_dir), "--output-dir", str(tmp_path / "out")]


def test_dead_rank_ends_the_run(task_dir: Path, tmp_path: Path) -> None:
    env = harness.base_env(ASSAY_TEST_FAIL_RANK="1", ASSAY_TEST_FAIL_MODE="exit")
    run = harness.launch(_argv(tmp_path, task_dir), env=env, nproc=2, timeout=BOUND_S + 30)
    assert run.returncode != 0
    assert run.seconds < BOUND_S
    # torchrun's failure summary names the root cause: rank 1, with the test LM's exit code.
    assert re.search(r"rank\s*:\s*1 .*\n\s*exitcode\s*:\s*17", run.output), run.output
    assert not list((tmp_path / "out").glob("**/results_*.json"))


def test_dead_rank_on_another_node_ends_both_nodes(task_dir: Path, tmp_path: Path) -> None:
    env = harness.base_env(ASSAY_TEST_FAIL_RANK="1", ASSAY_TEST_FAIL_MODE="exit", ASSAY_COLLECTIVE_TIMEOUT_S="15")
    runs = harness.launch_two_nodes(_argv(tmp_path, task_dir), env=env, timeout=BOUND_S + 30)
    assert all(r.returncode != 0 for r in runs), "\n\n".join(r.output for r in runs)
    assert max(r.seconds for r in runs) < BOUND_S


def test_hung_rank_is_named_within_the_collective_timeout(task_dir: Path, tmp_path: Path) -> None:
    env = harness.base_env(ASSAY_TEST_FAIL_RANK="1", ASSAY_TEST_FAIL_MODE="hang", ASSAY_COLLECTIVE_TIMEOUT_S="6")
    run = harness.launch(_argv(tmp_path, task_dir), env=env, nproc=2, timeout=BOUND_S + 30)
    assert run.returncode != 0
    assert run.seconds < BOUND_S
    assert "assay runner (rank 0 of 2): rank 1 stopped responding" in run.output, run.output
    assert "see its log" in run.output


def test_failing_rank_is_named_by_its_peer(task_dir: Path, tmp_path: Path) -> None:
    # rank 1 posts its error before exiting; rank 0, if torchrun has not stopped it first,
    # reports "rank 1 failed: ..." instead of waiting at the gather. Which of the two
    # happens first is a race, so only rank 1's own message is asserted.
    env = harness.base_env(ASSAY_TEST_FAIL_RANK="1", ASSAY_TEST_FAIL_MODE="raise", ASSAY_TEST_FAIL_AT="generate_until")
    run = harness.launch(_argv(tmp_path, task_dir), env=env, nproc=2, timeout=BOUND_S + 30)
    assert run.returncode != 0
    assert run.seconds < BOUND_S
    assert "assay runner (rank 1 of 2): RuntimeError: injected failure in generate_until" in run.output, run.output


def test_a_rank_stopped_by_a_peers_reported_failure_exits_75_and_the_failing_one_its_own_code(
    task_dir: Path, tmp_path: Path
) -> None:
    """Two pods' launchers (`assay.runner.launch`, as the runner Job starts them): the pod
    whose rank failed exits with that rank's code, the other with 75, which the Job's
    podFailurePolicy ignores, so one fault costs one retry."""
    env = harness.base_env(ASSAY_TEST_FAIL_RANK="1", ASSAY_TEST_FAIL_MODE="raise", ASSAY_TEST_FAIL_AT="loglikelihood")
    node0, node1 = harness.launch_two_nodes(
        _argv(tmp_path, task_dir), env=env, timeout=BOUND_S + 30, launcher="assay.runner.launch"
    )
    assert node1.returncode == 1, node1.output  # RuntimeError: the runner's code for "anything else"
    assert node0.returncode == 75, node0.output
    assert "assay runner (rank 0 of 2): rank 1 failed: RuntimeError: injected failure in loglikelihood" in node0.output
    assert max(node0.seconds, node1.seconds) < BOUND_S


def test_without_the_launcher_torchrun_says_1_for_every_failure(task_dir: Path, tmp_path: Path) -> None:
    """Why the launcher exists: plain torchrun loses the worker's 75 (and 78)."""
    env = harness.base_env(ASSAY_TEST_FAIL_RANK="1", ASSAY_TEST_FAIL_MODE="raise", ASSAY_TEST_FAIL_AT="loglikelihood")
    node0, node1 = harness.launch_two_nodes(_argv(tmp_path, task_dir), env=env, timeout=BOUND_S + 30)
    assert (node0.returncode, node1.returncode) == (1, 1), node0.output
