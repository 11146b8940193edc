"""Few-shot examples from a split the local data lacks: one sentence before the model loads.

lm-eval draws few-shot examples from fewshot_split, else from the first split the task names of
training, validation and test; where the dataset lacks that split it fails (KeyError) rather
than draw from another, and so does Assay, with a sentence naming the split, the folder, why
it is missing and the fixes. The data here is real files under ASSAY_DATASETS_DIR; the model
builder is a tripwire where the run must stop before it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from assay import cli
from assay.runner import evaluator

HUB_ID = "assay-test/fewshot_qa"
ROWS = [{"q": f"{i}+{i}", "choices": [str(2 * i), str(2 * i + 1)], "label": i % 2} for i in range(4)]
TASK = (
    f"dataset_path: {HUB_ID}\noutput_type: multiple_choice\ndoc_to_text: 'Q: {{{{q}}}}'\n"
    "doc_to_choice: '{{choices}}'\ndoc_to_target: label\n"
)


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(name, "1")
    monkeypatch.delenv("ASSAY_TASK_CODE", raising=False)


def _data(root: Path, *splits: str) -> Path:
    folder = root / HUB_ID / "default"
    folder.mkdir(parents=True, exist_ok=True)
    for split in splits:
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    return folder


@pytest.fixture
def tasks(tmp_path: Path) -> Path:
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "named.yaml").write_text(f"task: fs_named\ntraining_split: train\ntest_split: test\n{TASK}")
    (folder / "fixed.yaml").write_text(
        f"task: fs_fixed\ntraining_split: train\ntest_split: test\nnum_fewshot: 0\n{TASK}"
    )
    (folder / "from_val.yaml").write_text(f"task: fs_from_val\nvalidation_split: validation\ntest_split: test\n{TASK}")
    (folder / "in_config.yaml").write_text(
        f"task: fs_in_config\ntest_split: test\nfewshot_split: dev\nnum_fewshot: 2\n{TASK}"
    )
    return folder


def _run(capsys: pytest.CaptureFixture[str], tasks: Path, task: str, *flags: str) -> tuple[int, str, str]:
    code = cli.main(["run", "--model", "dummy", "--tasks", task, "--include_path", str(tasks), *flags])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.out, captured.err


def test_a_missing_training_split_is_one_sentence_before_the_model_loads(
    tasks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _data(tmp_path / "data", "test", "validation")
    monkeypatch.setenv("ASSAY_DATASETS_DIR", str(tmp_path / "data"))
    built: list[Any] = []
    monkeypatch.setattr(evaluator, "build_lm", lambda options, lm=None: built.append(options) or 1 / 0)
    code, _, err = _run(capsys, tasks, "fs_named", "--num_fewshot", "3")
    assert code == 1 and built == []
    assert err == (
        f"assay: error: Task 'fs_named' takes its 3 few-shot examples from the split 'train', which its data under "
        f"ASSAY_DATASETS_DIR ({folder}) lacks (it has test, validation; the public files `assay data import` "
        f"converts have no such split); run with --num_fewshot 0, add {folder / 'train'}.jsonl, or use the hub "
        "dataset (the Hugging Face hub within reach, without ASSAY_DATASETS_DIR).\n"
    )
    # A fewshot_split the task names itself, and the task's own num_fewshot, are checked the same way.
    code, _, err = _run(capsys, tasks, "fs_in_config")
    assert code == 1 and "takes its 2 few-shot examples from the split 'dev'" in err


def test_what_the_sentence_says_fixes_it(
    tasks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _data(tmp_path / "data", "test", "validation")
    monkeypatch.setenv("ASSAY_DATASETS_DIR", str(tmp_path / "data"))
    code, out, err = _run(capsys, tasks, "fs_named", "--num_fewshot", "0")
    assert code == 0 and "|fs_named|" in out.replace(" ", ""), err
    _data(tmp_path / "data", "train")
    code, out, err = _run(capsys, tasks, "fs_named", "--num_fewshot", "3")
    assert code == 0 and "|fs_named|" in out.replace(" ", ""), err


def test_tasks_whose_few_shot_split_is_there_or_unused_run(
    tasks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _data(tmp_path / "data", "test", "validation")
    monkeypatch.setenv("ASSAY_DATASETS_DIR", str(tmp_path / "data"))
    # No training split named: lm-eval draws from the validation split, which is there.
    code, _, err = _run(capsys, tasks, "fs_from_val", "--num_fewshot", "2")
    assert code == 0, err
    # The config fixes 0 shots: --num_fewshot does not apply, so no split is needed.
    code, _, err = _run(capsys, tasks, "fs_fixed", "--num_fewshot", "2")
    assert code == 0, err


def test_few_shot_arc_on_imported_data_names_the_missing_training_split(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from assay.runner.data import importer

    importer.import_benchmarks(shared_data, tmp_path / "data", ["arc"])
    monkeypatch.setenv("ASSAY_DATASETS_DIR", str(tmp_path / "data"))
    code = cli.main(["run", "--model", "dummy", "--tasks", "arc_easy", "--num_fewshot", "5"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert err.startswith("assay: error: Task 'arc_easy' takes its 5 few-shot examples from the split 'train'")
