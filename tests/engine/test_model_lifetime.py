"""The evaluator closes a model it built from a name, once, even when the run fails, and
leaves a caller's own instance open (vLLM's engine aborts the process if left to exit)."""

from __future__ import annotations

from pathlib import Path

import pytest

from assay.runner.evaluator import simple_evaluate
from assay.runner.models import register_model
from assay.runner.tasks.index import TaskManager
from tests.engine.fake_lm import AssayFakeLM
from tests.helpers import write_parity_tasks

CLOSED: list[str] = []


@register_model("assay-lifetime-test")
class LifetimeLM(AssayFakeLM):
    def __init__(self, fail: str = "no", **_: object) -> None:
        self.fail = fail == "yes"

    def loglikelihood(self, requests, *, disable_tqdm=False):
        if self.fail:
            raise RuntimeError("injected model failure")
        return super().loglikelihood(requests)

    def close(self) -> None:
        CLOSED.append("failed run" if self.fail else "run")


@pytest.fixture(scope="module")
def task_dir(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("lifetime_tasks")
    write_parity_tasks(root, shared_data, tmp_path_factory.mktemp("lifetime_work"))
    return root


def test_a_model_built_from_a_name_is_closed_once(task_dir: Path) -> None:
    CLOSED.clear()
    results = simple_evaluate("assay-lifetime-test", tasks=["p_arc"], limit=3, task_manager=TaskManager(str(task_dir)))
    assert "acc,none" in results["results"]["p_arc"]
    assert CLOSED == ["run"]


def test_a_failing_run_still_closes_its_model(task_dir: Path) -> None:
    CLOSED.clear()
    with pytest.raises(RuntimeError, match="injected model failure"):
        simple_evaluate(
            "assay-lifetime-test",
            model_args="fail=yes",
            tasks=["p_arc"],
            limit=3,
            task_manager=TaskManager(str(task_dir)),
        )
    assert CLOSED == ["failed run"]


def test_a_callers_instance_stays_open(task_dir: Path) -> None:
    CLOSED.clear()
    lm = LifetimeLM()
    simple_evaluate(lm, tasks=["p_arc"], limit=3, task_manager=TaskManager(str(task_dir)))
    assert CLOSED == []
