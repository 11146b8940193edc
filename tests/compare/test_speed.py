"""An MMLU-sized comparison (57 tasks, 14,022 documents, two metrics) runs to the end as a
fresh command and gives every task's rows; how long it takes is measured by
bench/compare_speed.py, not asserted here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.compare.crafted import write_mmlu_like_run


@pytest.mark.slow  # a fresh interpreter (subprocess), not the quick loop's pure Python
def test_an_mmlu_sized_comparison_gives_every_tasks_rows(tmp_path: Path) -> None:
    baseline, candidate = write_mmlu_like_run(tmp_path / "a", 0), write_mmlu_like_run(tmp_path / "b", 1)
    done = subprocess.run(
        [sys.executable, "-m", "assay", "compare", str(baseline), str(candidate), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,  # bounded, not timed: a comparison that hangs fails here
    )
    assert done.returncode in (0, 1), done.stderr[-2000:]
    assert done.stdout.count('"task": "mmlu_subject_') == 57 * 2 + 57  # two metrics' rows, then the tasks
