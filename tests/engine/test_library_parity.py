"""The shipped task library through Assay's engine against lm-eval's own tasks of the same
names, on the real benchmark files (converted once with `assay.runner.data.importer`).

Assay reads the data the way an air-gapped cluster would (ASSAY_DATASETS_DIR); lm-eval,
which has no such mechanism, gets the same files through a patched `datasets.load_dataset`
that stands in for the hub. Both query the deterministic model of fake_lm.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from assay.runner.data import importer as data_import
from assay.runner.data import local as datasets_local
from assay.runner.evaluator import simple_evaluate
from assay.runner.tasks.index import TaskManager
from tests.engine.fake_lm import AssayFakeLM, lmeval_fake_lm
from tests.engine.parity_checks import assert_rows_equal, assert_samples_equal

lm_eval = pytest.importorskip("lm_eval")
import lm_eval.tasks  # noqa: E402  (submodule used below; not imported by the package)

datasets = pytest.importorskip("datasets")

LMEVAL_TASKS = Path(lm_eval.__file__).resolve().parent / "tasks"
FOLDERS = [
    "hellaswag",
    "arc",
    "piqa",
    "winogrande",
    "super_glue/boolq",
    "super_glue/copa",
    "lambada",
    "wikitext",
    "mmlu/default",
    "gsm8k",
    "truthfulqa",
    "openbookqa",
]


@pytest.fixture(scope="module")
def converted(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("datasets_dir")
    data_import.import_benchmarks(shared_data, dst)
    return dst


@pytest.fixture
def hub_from(converted: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = datasets.load_dataset

    def load_dataset(path: str | None = None, name: str | None = None, **kwargs: Any) -> Any:
        files = datasets_local.find_local_files(path, name, roots=[converted])
        if files is None:
            return real(path, name, **kwargs)
        loaded = real("json", data_files={split: str(file) for split, file in files.items()})
        first = next(iter(loaded.values()))
        # lm-eval builds its few-shot pool when a task is created, so a 0-shot run still
        # needs the training split these public files lack.
        for split in ("train", "validation", "test"):
            if split not in loaded:
                loaded[split] = first
        return loaded

    monkeypatch.setenv(datasets_local.ENV_VAR, str(converted))
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)


def _run_both(tasks: list[str], **kwargs: Any) -> tuple[dict, dict]:
    ours = simple_evaluate(AssayFakeLM(), tasks=tasks, task_manager=TaskManager(), **kwargs)
    reference = lm_eval.tasks.TaskManager(include_path=[str(LMEVAL_TASKS / f) for f in FOLDERS], include_defaults=False)
    theirs = lm_eval.simple_evaluate(model=lmeval_fake_lm(), tasks=tasks, task_manager=reference, **kwargs)
    return ours, theirs


@pytest.mark.slow
def test_headline_tasks_match_lm_eval(hub_from: None) -> None:
    tasks = [
        "arc_easy",
        "arc_challenge",
        "piqa",
        "boolq",
        "copa",
        "lambada_openai",
        "wikitext",
        "openbookqa",
        "truthfulqa_mc1",
        "truthfulqa_mc2",
        "winogrande",
        "hellaswag",
    ]
    ours, theirs = _run_both(tasks, limit=6, bootstrap_iters=200)
    assert_rows_equal(ours, theirs)
    assert_samples_equal(ours, theirs)
    # no false alarm: a model answering at random (fake_lm's hashes) passes its sentinels
    assert ours["sentinels"]["trusted"] is True, ours["sentinels"]
    assert ours["sentinels"]["tasks"]["truthfulqa_mc1"]["skipped"] == ["below_chance"]


@pytest.mark.slow
def test_gsm8k_five_shot_and_mmlu_group_match_lm_eval(hub_from: None) -> None:
    ours, theirs = _run_both(["gsm8k", "mmlu_stem"], limit=2, bootstrap_iters=200)
    assert_rows_equal(ours, theirs)
    assert_samples_equal(ours, theirs)
    assert ours["sentinels"]["trusted"] is True, ours["sentinels"]
    assert ours["n-shot"]["gsm8k"] == 5
