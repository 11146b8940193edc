"""Assay's `--model vllm` against lm-eval's `vllm` backend, both in process on vLLM's CPU build.

Each side runs in the vLLM venv (tests/served/engine_run.py, one engine per process) on
the tiny GPT-2 (head size 32) with float32 and the same task YAMLs: metrics agree within
1e-5 relative, per-request log-likelihoods within 1e-5, greedy generations exactly.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.helpers import write_parity_tasks
from tests.model_fixtures import N_POSITIONS, gpt2_dir  # noqa: F401  (fixture)
from tests.served.vllm_server import vllm_python

pytestmark = [pytest.mark.parity, pytest.mark.slow]


def _run(which: str, model_dir: Path, task_dir: Path, out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_TARGET_DEVICE": "cpu"}
    done = subprocess.run(
        [
            str(vllm_python()),
            str(Path(__file__).with_name("engine_run.py")),
            which,
            str(model_dir),
            str(task_dir),
            str(out),
            str(N_POSITIONS),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=str(out.parent),
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(out.read_text())


def test_vllm_in_process_matches_lm_eval_vllm(gpt2_dir: Path, shared_data: Path, tmp_path: Path) -> None:
    task_dir = write_parity_tasks(tmp_path / "tasks", shared_data, tmp_path / "work")
    ours = _run("assay", gpt2_dir, task_dir, tmp_path / "assay.json")
    assert ours["sentinels"]["trusted"] is True, ours["sentinels"]  # no false alarm on a real engine
    theirs = _run("lm-eval", gpt2_dir, task_dir, tmp_path / "lm_eval.json")
    assert set(ours["results"]) == set(theirs["results"])
    for name, row in theirs["results"].items():
        for key, value in row.items():
            mine = ours["results"][name][key]
            if isinstance(value, (int, float)) and isinstance(mine, (int, float)):
                assert math.isclose(mine, value, rel_tol=1e-5, abs_tol=1e-9), (name, key, mine, value)
            else:
                assert mine == value, (name, key)
    compared = 0
    for task, rows in theirs["samples"].items():
        for mine, ref in zip(ours["samples"][task], rows, strict=True):
            for got, want in zip(mine["resps"], ref["resps"], strict=True):
                got, want = got[0], want[0]
                if isinstance(want, str):
                    assert got == want, (task, mine["doc_id"])
                elif isinstance(want, list):
                    assert math.isclose(got[0], want[0], rel_tol=1e-5, abs_tol=1e-5) and bool(got[1]) == bool(want[1])
                else:
                    assert math.isclose(got, want, rel_tol=1e-5, abs_tol=1e-5)
                compared += 1
    assert compared > 30
    print(f"vllm in process: {compared} answers; assay {ours['seconds']:.1f} s, lm-eval {theirs['seconds']:.1f} s")
