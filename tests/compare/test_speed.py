"""An MMLU-sized comparison (57 tasks, 14,022 documents, two metrics) takes about a second."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.compare.crafted import write_run

QUESTION = (
    "Which of the following best describes the structure that collects urine in the body? " * 8
)  # MMLU-like length


def _mmlu_like(folder: Path, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    tasks = {
        f"mmlu_subject_{s}": [
            {"doc_id": i, "doc": f"{s}-{i}", "acc": int(rng.random() < 0.6), "acc_norm": int(rng.random() < 0.6)}
            for i in range(246)
        ]
        for s in range(57)
    }
    return write_run(folder, tasks, doc_text=QUESTION)


@pytest.mark.slow  # a fresh interpreter (subprocess), not the quick loop's pure Python
def test_an_mmlu_sized_comparison_takes_about_a_second(tmp_path: Path) -> None:
    baseline, candidate = _mmlu_like(tmp_path / "a", 0), _mmlu_like(tmp_path / "b", 1)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "assay", "compare", str(baseline), str(candidate), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    elapsed = time.perf_counter() - start
    assert done.returncode in (0, 1), done.stderr[-2000:]
    assert done.stdout.count('"task": "mmlu_subject_') == 57 * 2 + 57  # two metrics' rows, then the tasks
    assert elapsed < 4.0, f"{elapsed:.1f} s (the goal is about 1 s; the limit leaves room for a busy CI machine)"
