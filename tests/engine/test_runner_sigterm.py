"""A runner pod told to stop (SIGTERM: deleted, evicted, preempted) leaves at once with 143,
and does not report the stop as the run's failure.

A real process gets a real signal; only the evaluation itself is replaced, by a wait, so that
the signal arrives mid-run whatever the machine's speed; the status sink records what it is told.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HARNESS = """
import json, sys, time
from pathlib import Path
from assay.runner import job

started, told = Path(sys.argv[2]), Path(sys.argv[3])

class Sink:
    def failed(self, message):
        told.write_text(json.dumps({"failed": message}))

def evaluation_in_progress(*args, **kwargs):
    started.touch()
    time.sleep(120)

job._sink = lambda rank: Sink()
job.run_spec = evaluation_in_progress
raise SystemExit(job.main(["--spec", sys.argv[1]]))
"""


def _runner(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], Path]:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"model": "dummy", "tasks": ["arc_easy"], "limit": 4}))
    started, told = tmp_path / "started", tmp_path / "told.json"
    process = subprocess.Popen(
        [sys.executable, "-c", HARNESS, str(spec), str(started), str(told)],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 60
    while not started.exists():
        assert process.poll() is None, process.communicate()[1]
        assert time.monotonic() < deadline, "the runner did not start its evaluation within 60 s"
        time.sleep(0.05)
    return process, told


def test_sigterm_mid_run_exits_143_at_once_and_is_not_a_failure(tmp_path: Path) -> None:
    alone = {key: value for key, value in os.environ.items() if key != "LOCAL_RANK"}
    process, told = _runner(tmp_path, alone)
    process.send_signal(signal.SIGTERM)
    try:
        _, stderr = process.communicate(timeout=10)  # not the 120 s the run would take
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail("the runner did not stop within 10 s of SIGTERM")
    assert process.returncode == 143, stderr
    assert "stopped (SIGTERM" in stderr and "Traceback" not in stderr, stderr
    assert not told.exists(), told.read_text()


def test_a_torchrun_worker_keeps_the_default_so_its_launcher_reads_the_stop(tmp_path: Path) -> None:
    process, told = _runner(tmp_path, {**os.environ, "LOCAL_RANK": "0"})
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=10)
    assert process.returncode == -signal.SIGTERM
    assert not told.exists()


def test_the_handler_is_the_runs_alone(tmp_path: Path) -> None:
    """A caller of `main` in its own process (a test, a notebook) keeps its SIGTERM handler:
    multiprocessing's pools, forked later, stop their workers with SIGTERM."""
    from assay.runner import job

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"model": "dummy", "tasks": ["no_such_task"], "limit": 4}))
    before = signal.getsignal(signal.SIGTERM)
    job.main(["--spec", str(spec), "--output-dir", str(tmp_path / "out")])
    assert signal.getsignal(signal.SIGTERM) is before
