"""A retried pod that reaches the failed attempt's closed rendezvous, or no rendezvous yet,
joins again, and runs.

On a cluster: rank 1's pod fails, the Job starts its replacement at once, and that
replacement's torchrun can reach rank 0's rendezvous before rank 0's old pod has ended; the
rendezvous is closed by then. Here the old attempt is a process holding a closed c10d
rendezvous on the endpoint; once it ends, a fresh "rank 0" launcher starts, as the Job's
replacement would, and the two meet and run their workers. When rank 0's replacement is not
up yet, torchrun's connection to the rendezvous times out; the retried launcher joins again
until it is.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.distributed import harness

pytestmark = pytest.mark.distributed

RUN_ID = "assay-rejoin"

CLOSED_ATTEMPT = f"""
import sys, time
from torch.distributed import TCPStore
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler

store = TCPStore("127.0.0.1", int(sys.argv[1]), is_master=True, wait_for_workers=False)
backend = C10dRendezvousBackend(store, "{RUN_ID}")
DynamicRendezvousHandler.from_backend("{RUN_ID}", store, backend, min_nodes=2, max_nodes=2).set_closed()
print("closed", flush=True)
time.sleep(600)
"""

WORKER = "import os; print('worker of rank', os.environ['RANK'], 'ran', flush=True)\n"


def _launcher(endpoint: str, worker: Path, log: Path, *rdzv_conf: str) -> subprocess.Popen[str]:
    argv = [
        sys.executable, "-m", "assay.runner.launch", "--nnodes=2", "--nproc_per_node=1", "--max_restarts=0",
        "--monitor_interval=0.5", "--rdzv_backend=c10d", f"--rdzv_endpoint={endpoint}", f"--rdzv_id={RUN_ID}",
    ]  # fmt: skip
    if rdzv_conf:
        argv.append(f"--rdzv_conf={','.join(rdzv_conf)}")
    argv.append(str(worker))
    with log.open("w") as out:
        return subprocess.Popen(
            argv, env=harness.base_env(), cwd=harness.REPO_ROOT, stdout=out, stderr=subprocess.STDOUT, text=True
        )


def _wait_for(what: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_a_launcher_that_meets_a_closed_rendezvous_joins_the_next_one(tmp_path: Path) -> None:
    port = harness.free_port()
    endpoint = f"127.0.0.1:{port}"
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    old = subprocess.Popen([sys.executable, "-c", CLOSED_ATTEMPT, str(port)], stdout=subprocess.PIPE, text=True)
    launchers: list[subprocess.Popen[str]] = []
    try:
        assert old.stdout is not None and old.stdout.readline().strip() == "closed"
        retried_log = tmp_path / "retried.log"
        launchers.append(_launcher(endpoint, worker, retried_log))
        _wait_for(
            "the launcher to find the rendezvous closed",
            lambda: "is closed" in retried_log.read_text() or launchers[0].poll() is not None,
            timeout=120,
        )
        assert launchers[0].poll() is None, retried_log.read_text()  # it waits to join again

        old.kill()  # the failed attempt's rank 0 ends; its replacement starts
        old.wait()
        launchers.append(_launcher(endpoint, worker, tmp_path / "replacement.log"))
        codes = [launcher.wait(timeout=180) for launcher in launchers]
    finally:
        for process in [old, *launchers]:
            process.kill()
    logs = retried_log.read_text() + (tmp_path / "replacement.log").read_text()
    assert codes == [0, 0], logs
    assert "worker of rank 0 ran" in logs and "worker of rank 1 ran" in logs, logs


def test_a_launcher_that_cannot_reach_the_rendezvous_yet_joins_once_it_is_up(tmp_path: Path) -> None:
    port = harness.free_port()
    endpoint = f"127.0.0.1:{port}"
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    retried_log = tmp_path / "retried.log"
    # Not the host (as rank 1's pod is not rank 0's), with a 3 s connect timeout in place of 60 s.
    launchers = [_launcher(endpoint, worker, retried_log, "is_host=false", "read_timeout=3")]
    try:
        _wait_for(
            "the launcher to find the rendezvous unreachable",
            lambda: "cannot be reached" in retried_log.read_text() or launchers[0].poll() is not None,
            timeout=120,
        )
        assert launchers[0].poll() is None, retried_log.read_text()  # it waits to join again

        launchers.append(_launcher(endpoint, worker, tmp_path / "rank0.log"))  # rank 0's pod comes up
        codes = [launcher.wait(timeout=180) for launcher in launchers]
    finally:
        for process in launchers:
            process.kill()
    logs = retried_log.read_text() + (tmp_path / "rank0.log").read_text()
    assert codes == [0, 0], logs
    assert "worker of rank 0 ran" in logs and "worker of rank 1 ran" in logs, logs
