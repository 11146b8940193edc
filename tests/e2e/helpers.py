"""Specs and local reference runs shared by the e2e tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HF_TASKS = ["arc_easy", "lambada_openai"]
LIMIT = 8
BATCH_SIZE = 4
SEED = 1234


MODEL_IN_POD = "/cache/models/tiny-gpt2"
SECOND_MODEL_IN_POD = "/cache/models/tiny-gpt2-b"
VOLUMES = {
    # The namespace's `cache` claim holds the model and Assay's offline datasets; results
    # go to its `output` claim (both local PersistentVolumes made by the `cluster` fixture).
    "cache": {"pvc": "cache", "offline": True, "localDatasetsDir": "datasets"},
    "output": {"pvc": "output"},
}


def hf_spec(model: str = MODEL_IN_POD, **overrides: Any) -> dict[str, Any]:
    """A tiny GPT-2 on two shipped tasks, 8 documents each: ~15 s of CPU per run."""
    spec: dict[str, Any] = {
        "model": "hf",
        "modelArgs": {"pretrained": model, "dtype": "float32", "device": "cpu"},
        "tasks": list(HF_TASKS),
        "limit": LIMIT,
        "batchSize": BATCH_SIZE,
        "seed": SEED,
        "resources": {"nodes": 1, "gpusPerNode": 0},
        **VOLUMES,
        "backoffLimit": 0,
    }
    spec.update(overrides)
    return spec


# ~12,500 requests (arc_easy's 2,376 questions x 4 choices and 3,000 lambada passages) at
# batch size 1: ~20 s of scoring on two cores after the start-up, long enough for a test to act
# in the middle of the run; a test that needs several progress reports (every 5 s) also caps
# its CPU. Batch size 1, because at 8 the engine runs documents together and the same run
# takes ~5 s, too short to act in the middle of.
LONG_RUN: dict[str, Any] = {"tasks": ["arc_easy", "lambada_openai"], "limit": 3000, "batchSize": 1}


def dummy_spec(**overrides: Any) -> dict[str, Any]:
    """lm-eval's `dummy` model (seeded random answers): a run in a few seconds."""
    spec: dict[str, Any] = {
        "model": "dummy",
        "tasks": ["arc_easy"],
        "limit": 4,
        "seed": SEED,
        "resources": {"nodes": 1, "gpusPerNode": 0},
        **VOLUMES,
        "backoffLimit": 0,
    }
    spec.update(overrides)
    return spec


def local_assay_run(model_dir: Path, out: Path, *, datasets_dir: Path) -> dict[str, Any]:
    """`assay run` with lm-eval's flags for the same evaluation as `hf_spec`; its results JSON."""
    env = {**os.environ, "ASSAY_DATASETS_DIR": str(datasets_dir), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "assay",
            "run",
            "--model",
            "hf",
            "--model_args",
            f"pretrained={model_dir},dtype=float32,device=cpu",
            "--tasks",
            ",".join(HF_TASKS),
            "--limit",
            str(LIMIT),
            "--batch_size",
            str(BATCH_SIZE),
            "--seed",
            str(SEED),
            "--output_path",
            str(out),
        ],
        env=env,
        check=False,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise AssertionError(f"the local `assay run` failed ({result.returncode}):\n{result.stderr[-4000:]}")
    (path,) = sorted(out.rglob("results_*.json"))
    return json.loads(path.read_text())


def condensed(results: dict[str, Any]) -> dict[str, Any]:
    """What the runner's status sink writes for these results (results, groups, nSamples, versions)."""
    from assay.run_results import RunResults
    from assay.runner.results.status_sink import condense_results

    status = condense_results(RunResults.from_lmeval_dict(results))
    return {k: status[k] for k in ("results", "nSamples", "versions")}
