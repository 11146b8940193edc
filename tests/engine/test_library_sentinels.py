"""No false alarm: every task of the library, scored by tiny random models, passes its sentinels.

A random model is at chance, not significantly below it, and its log-likelihoods differ
from choice to choice and from document to document; its answers are nonsense, not empty.
So on a small --limit (where a run of bad luck is likeliest) none of the checks may fire:
that is what the small α of the below-chance test and the fractions' defaults are for.
The documents are the shared benchmark files, read as an air-gapped cluster reads them
(ASSAY_DATASETS_DIR), and for SciQ, which they lack, tests/engine/test_task_library.py's
hand-made documents.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from assay.runner.data import local as datasets_local
from assay.runner.evaluator import simple_evaluate
from assay.runner.tasks.index import TaskManager
from tests.engine.task_library_names import HANDMADE, OUR_TASKS
from tests.model_fixtures import gpt2_dir, llama_dir  # noqa: F401  (fixtures)

LIMIT = 8


@pytest.fixture
def datasets_dir(converted: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    handmade = tmp_path / "handmade"
    for (path, name), rows in HANDMADE.items():
        folder = handmade / path / (name or "default")
        folder.mkdir(parents=True, exist_ok=True)
        for split in ("train", "validation", "test"):
            (folder / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    monkeypatch.setenv(datasets_local.ENV_VAR, f"{converted}:{handmade}")


def _untrusted(results: dict[str, Any]) -> dict[str, Any]:
    block = results["sentinels"]
    return {
        task: {check: finding for check, finding in entry["checks"].items() if not finding["passed"]}
        for task, entry in block["tasks"].items()
        if not entry["trusted"]
    }


@pytest.mark.slow
@pytest.mark.parametrize("model", ["gpt2", "llama"])
def test_every_library_task_passes_its_sentinels_with_a_tiny_random_model(
    model: str,
    datasets_dir: None,
    gpt2_dir: Path,
    llama_dir: Path,
) -> None:
    directory = {"gpt2": gpt2_dir, "llama": llama_dir}[model]
    results = simple_evaluate(
        "hf",
        model_args=f"pretrained={directory},dtype=float32,device=cpu",
        tasks=OUR_TASKS,
        limit=LIMIT,
        batch_size=8,
        bootstrap_iters=0,
        gen_kwargs="max_gen_toks=16",
        task_manager=TaskManager(),
    )
    assert results is not None
    checked = results["sentinels"]["tasks"]
    assert set(checked) == set(OUR_TASKS)
    assert _untrusted(results) == {}
    assert results["sentinels"]["trusted"] is True
    # the checks ran, not only passed: multiple choice had its test, generation its fractions
    assert checked["arc_easy"]["checks"]["below_chance"]["documents"] == LIMIT
    assert checked["gsm8k"]["checks"]["empty"]["documents"] == LIMIT
    assert checked["truthfulqa_mc1"]["skipped"] == ["below_chance"]
