"""Assay's pipeline against lm-eval's on real benchmark data, with one deterministic model.

Both harnesses load the same task YAMLs (through include_path) and the same local files,
and query the same hash-defined model (see fake_lm.py), so every metric, stderr, group
value and logged prompt must agree.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from assay.runner.evaluator import simple_evaluate
from assay.runner.tasks.index import TaskManager
from tests.engine.fake_lm import AssayFakeLM, lmeval_fake_lm
from tests.helpers import copy_tasks, write_parity_tasks

lm_eval = pytest.importorskip("lm_eval")
import lm_eval.tasks  # noqa: E402  (submodule used below; not imported by the package)

from tests.engine.parity_checks import assert_rows_equal, assert_samples_equal  # noqa: E402

pytestmark = pytest.mark.parity


@pytest.fixture(scope="module")
def task_dir(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tasks")
    write_parity_tasks(root, shared_data, tmp_path_factory.mktemp("work"))
    return root


def _both(task_dir: Path, tasks: list[str], **kwargs):
    ours = simple_evaluate(AssayFakeLM(), tasks=tasks, task_manager=TaskManager(str(task_dir)), **kwargs)
    theirs = lm_eval.simple_evaluate(
        model=lmeval_fake_lm(),
        tasks=tasks,
        task_manager=lm_eval.tasks.TaskManager(include_path=str(task_dir), include_defaults=False),
        **kwargs,
    )
    return ours, theirs


def test_multiple_choice_generation_and_group_match_lm_eval(task_dir: Path) -> None:
    ours, theirs = _both(task_dir, ["p_group", "p_gsm", "p_boolq"], limit=30, bootstrap_iters=500)
    assert_rows_equal(ours, theirs)
    assert_samples_equal(ours, theirs)
    assert ours["groups"]["p_group"]["acc,none"] == pytest.approx(theirs["groups"]["p_group"]["acc,none"], rel=1e-12)


def test_fewshot_and_rolling_match_lm_eval(task_dir: Path) -> None:
    ours, theirs = _both(task_dir, ["p_arc", "p_rolling", "p_lambada"], num_fewshot=5, limit=25, bootstrap_iters=2000)
    assert_rows_equal(ours, theirs)
    assert_samples_equal(ours, theirs)


def test_system_instruction_samples_and_fraction_limit_match_lm_eval(task_dir: Path) -> None:
    ours, theirs = _both(
        task_dir,
        ["p_arc", "p_gsm"],
        samples={"p_arc": [3, 1, 7], "p_gsm": [0, 5]},
        system_instruction="You are a careful grader.",
        bootstrap_iters=0,
    )
    assert_rows_equal(ours, theirs)
    assert_samples_equal(ours, theirs)
    ours, theirs = _both(task_dir, ["p_wino"], limit=0.01, num_fewshot=2, bootstrap_iters=100)
    assert_rows_equal(ours, theirs)
    assert_samples_equal(ours, theirs)


def test_predict_only_and_gen_kwargs_match_lm_eval(task_dir: Path) -> None:
    ours, theirs = _both(task_dir, ["p_gsm"], limit=5, predict_only=True, gen_kwargs="max_gen_toks=16,temperature=0")
    assert_rows_equal(ours, theirs)
    assert_samples_equal(ours, theirs)


@pytest.fixture(scope="module")
def field_task_dir(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("field_tasks")
    copy_tasks("yaml_fields", root, data=shared_data)
    return root


def test_yaml_fields_match_lm_eval(field_task_dir: Path) -> None:
    """include, !function everywhere, description template, delimiters, first_n and
    fixed few-shot samples, process_results, repeats + majority vote, gen_prefix, tags,
    multiple targets."""
    ours, theirs = _both(
        field_task_dir, ["f_tag", "f_generation", "f_multi_target"], num_fewshot=2, limit=12, bootstrap_iters=300
    )
    assert_rows_equal(ours, theirs)
    assert_samples_equal(ours, theirs)
    assert ours["results"]["f_functions"]["alias"] == "functions and delimiters"


@pytest.mark.parametrize("multiturn", [True, False])
def test_chat_template_matches_lm_eval(task_dir: Path, field_task_dir: Path, multiturn: bool) -> None:
    ours, theirs = _both(
        task_dir,
        ["p_arc", "p_gsm", "p_wino"],
        num_fewshot=2,
        limit=8,
        apply_chat_template=True,
        fewshot_as_multiturn=multiturn,
        system_instruction="Be brief.",
        bootstrap_iters=100,
    )
    assert_rows_equal(ours, theirs)
    assert_samples_equal(ours, theirs)
    assert ours["samples"]["p_arc"][0]["arguments"][0][0].startswith("<|system|>Be brief.")
    ours, theirs = _both(
        field_task_dir,
        ["f_generation"],
        num_fewshot=1,
        limit=4,
        apply_chat_template=True,
        fewshot_as_multiturn=multiturn,
    )
    assert_samples_equal(ours, theirs)
