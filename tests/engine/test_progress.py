"""Progress reports: monotone, and ending at the run's total request count."""

from __future__ import annotations

from pathlib import Path

from assay.runner.evaluator import simple_evaluate
from assay.runner.tasks.index import TaskManager
from tests.engine.fake_lm import AssayFakeLM


def test_progress_reports_reach_the_total_in_order(parity_task_dir: Path) -> None:
    reports: list[tuple[int, int]] = []
    simple_evaluate(
        AssayFakeLM(),
        tasks=["p_arc", "p_gsm"],
        limit=5,
        bootstrap_iters=0,
        task_manager=TaskManager(str(parity_task_dir)),
        progress=lambda done, total: reports.append((done, total)),
    )
    totals = {total for _, total in reports}
    assert len(totals) == 1
    total = totals.pop()
    assert total > 5  # arc's choices plus gsm's generations
    assert [done for done, _ in reports] == sorted(done for done, _ in reports)
    assert reports[-1] == (total, total)
