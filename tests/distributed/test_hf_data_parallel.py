"""A real (tiny, randomly initialised) GPT-2 through the HF backend: 2 ranks equal 1 rank.

Ranks batch different subsets, so padding and batch composition differ from the single
process; scores may move in the last bits, hence the 1e-6 tolerance. The model runs in
float64 so that this noise stays far below the tolerance (in float32 the bootstrap stderr
of perplexity amplifies it to ~1e-5 relative), and the test measures distribution only.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.distributed import harness
from tests.model_fixtures import tiny_gpt2

pytestmark = pytest.mark.distributed


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=False))
    return a == b


def test_hf_gpt2_two_ranks_match_one_rank(shared_data: Path, task_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    model_dir = tiny_gpt2(tmp_path / "gpt2", shared_data / "gpt2_tokenizer")
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "model": "hf",
                "modelArgs": {"pretrained": str(model_dir), "device": "cpu", "dtype": "float64"},
                "batchSize": 2,
                "tasks": harness.TASKS,
                "limit": 4,
                "logSamples": True,
            }
        )
    )
    env = harness.base_env()
    runs = {}
    for world in (1, 2):
        argv = [
            "runner",
            "--spec",
            str(spec),
            "--include_path",
            str(task_dir),
            "--output-dir",
            str(tmp_path / f"out{world}"),
        ]
        run = harness.launch(argv, env=env, nproc=None if world == 1 else world, timeout=150)
        assert run.returncode == 0, run.output
        runs[world] = harness.read_outputs(tmp_path / f"out{world}")
    (one, one_samples), (two, two_samples) = runs[1], runs[2]
    for key in ("results", "groups", "n-samples", "versions", "n-shot"):
        assert _close(one[key], two[key]), (key, one[key], two[key])
    assert one_samples.keys() == two_samples.keys()
    for task, rows in one_samples.items():
        assert len(rows) == len(two_samples[task])
        for mine, theirs in zip(rows, two_samples[task], strict=False):
            for key in ("doc_id", "arguments", "prompt_hash", "target", "filter", "metrics"):
                assert mine[key] == theirs[key], (task, key)
            for metric in mine["metrics"]:
                assert _close(mine[metric], theirs[metric]), (task, metric, mine[metric], theirs[metric])
            if task == "d_gsm":
                assert mine["filtered_resps"] == theirs["filtered_resps"], task
