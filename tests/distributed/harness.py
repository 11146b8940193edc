"""Launching Assay under torchrun in tests, and comparing what runs write.

Each run is a real subprocess tree (torchrun and its workers, or one plain process), so
every test pays Python and torch start-up: keep data tiny.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conftest import shared_data_dir
from tests.helpers import copy_tasks

REPO_ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = Path(__file__).resolve().with_name("launch.py")
MODEL_NAME = "assay-test"

# Keys of the results file that describe the run rather than its outcome (the checkout can
# move on between two runs of one session: others commit while tests run).
VOLATILE_KEYS = {"date", "git_hash", "total_evaluation_time_seconds", "start_time", "end_time", "pretty_env_info"}


def write_tasks(root: Path, data: Path) -> Path:
    """Small local tasks over the shared benchmark files: all four output types, filters, a group."""
    return copy_tasks("distributed", root, data=data)


TASKS = ["d_group", "d_lambada", "d_rolling", "d_gsm"]


def spec_file(path: Path, **fields: Any) -> Path:
    spec = {
        "model": MODEL_NAME,
        "modelArgs": {"pretrained": "assay-test-model"},
        "tasks": TASKS,
        "limit": 6,
        "logSamples": True,
        **fields,
    }
    path.write_text(json.dumps(spec))
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASSAY_TEST_", "ASSAY_EVALUATION"))}
    env.update(
        {
            "PYTHONPATH": str(REPO_ROOT),
            "OMP_NUM_THREADS": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "ASSAY_LOG_LEVEL": "WARNING",
            # The runner takes its include path as a tenant's: data_files inside the datasets directory only.
            "ASSAY_DATASETS_DIR": str(shared_data_dir()),
        }
    )
    env.update(extra)
    return env


@dataclass
class Run:
    returncode: int
    output: str
    seconds: float


def torchrun_args(
    nproc: int,
    *,
    nnodes: int = 1,
    node_rank: int = 0,
    endpoint: str | None = None,
    launcher: str = "torch.distributed.run",
) -> list[str]:
    args = [sys.executable, "-m", launcher, f"--nproc_per_node={nproc}", "--max_restarts=0", "--monitor_interval=0.5"]
    if nnodes == 1:
        return [*args, "--standalone"]
    return [
        *args,
        f"--nnodes={nnodes}",
        f"--node_rank={node_rank}",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint={endpoint}",
        "--rdzv_id=assay-test",
    ]


def launch(argv: list[str], *, env: dict[str, str], nproc: int | None = None, timeout: float = 120) -> Run:
    """`launch.py argv` as one plain process (nproc None) or under torchrun with nproc workers."""
    prefix = [sys.executable] if nproc is None else torchrun_args(nproc)
    start = time.monotonic()
    done = subprocess.run(
        [*prefix, str(LAUNCHER), *argv], env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout
    )
    return Run(done.returncode, done.stdout + done.stderr, time.monotonic() - start)


def launch_two_nodes(
    argv: list[str], *, env: dict[str, str], timeout: float = 120, launcher: str = "torch.distributed.run"
) -> list[Run]:
    """Two torchrun agents (one worker each) meeting over c10d rendezvous on 127.0.0.1."""
    endpoint = f"127.0.0.1:{free_port()}"
    start = time.monotonic()
    procs = [
        subprocess.Popen(
            [*torchrun_args(1, nnodes=2, node_rank=rank, endpoint=endpoint, launcher=launcher), str(LAUNCHER), *argv],
            env=env,
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    runs = []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=max(timeout - (time.monotonic() - start), 1))
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            raise
        runs.append(Run(proc.returncode, out, time.monotonic() - start))
    return runs


def read_outputs(out_dir: Path) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """The one results JSON under `out_dir` and its samples JSONL files, by task."""
    results_files = sorted(out_dir.glob("**/results_*.json"))
    assert len(results_files) == 1, f"expected one results file under {out_dir}, found {results_files}"
    results = json.loads(results_files[0].read_text())
    samples = {}
    for path in sorted(results_files[0].parent.glob("samples_*.jsonl")):
        task = path.name[len("samples_") :].rsplit("_", 1)[0]
        samples[task] = [json.loads(line) for line in path.read_text().splitlines()]
    return results, samples


def outcome(results: dict[str, Any]) -> dict[str, Any]:
    """The results file without the keys that describe when and where it ran."""
    return {k: v for k, v in results.items() if k not in VOLATILE_KEYS}
