"""The offline data path: the importer's converters, the ASSAY_DATASETS_DIR layout, and
loading a task's dataset from local files (or failing in one sentence without them).

Needs only the shared benchmark files, not lm-eval.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from assay.errors import UserError
from assay.runner.data import converters
from assay.runner.data import importer as data_import
from assay.runner.data import local as datasets_local
from tests.helpers import head_jsonl as _head
from tests.helpers import read_jsonl as _read_jsonl

datasets = pytest.importorskip("datasets")


# Record counts from shared/data/README.md.
EXPECTED_ROWS = {
    "openai/gsm8k/main/test.jsonl": 1319,
    "openai/gsm8k/main/train.jsonl": 7473,
    "truthfulqa/truthful_qa/multiple_choice/validation.jsonl": 817,
    "truthfulqa/truthful_qa/generation/validation.jsonl": 817,
    "EleutherAI/lambada_openai/default/test.jsonl": 5153,
    "EleutherAI/wikitext_document_level/wikitext-2-raw-v1/test.jsonl": 62,
    "baber/piqa/default/validation.jsonl": 1838,
    "Rowan/hellaswag/default/validation.jsonl": 10042,
    "allenai/ai2_arc/ARC-Challenge/test.jsonl": 1172,
    "allenai/ai2_arc/ARC-Challenge/validation.jsonl": 299,
    "allenai/ai2_arc/ARC-Easy/test.jsonl": 2376,
    "allenai/ai2_arc/ARC-Easy/validation.jsonl": 570,
    "aps/super_glue/boolq/validation.jsonl": 3270,
    "aps/super_glue/copa/validation.jsonl": 100,
    "allenai/openbookqa/main/test.jsonl": 500,
    "allenai/openbookqa/main/validation.jsonl": 500,
    "allenai/winogrande/winogrande_xl/validation.jsonl": 1267,
}


def _count(path: Path) -> int:
    with path.open(encoding="utf-8") as f:
        return sum(1 for _ in f)


def test_import_record_counts_match_the_data_readme(converted: Path) -> None:
    for rel, rows in EXPECTED_ROWS.items():
        assert _count(converted / rel) == rows, rel
    mmlu = converted / "cais/mmlu"
    assert len(list(mmlu.iterdir())) == 57
    for split, rows in {"dev": 285, "validation": 1531, "test": 14042}.items():
        assert sum(_count(p) for p in mmlu.glob(f"*/{split}.jsonl")) == rows, split


def test_imported_columns_follow_the_hub_schemas(converted: Path) -> None:
    boolq = list(_read_jsonl(converted / "aps/super_glue/boolq/validation.jsonl"))
    assert {r["label"] for r in boolq} == {0, 1} and sum(r["label"] for r in boolq) == 2033
    arc = _head(converted / "allenai/ai2_arc/ARC-Easy/test.jsonl", 1)[0]
    assert set(arc) == {"id", "question", "choices", "answerKey"} and set(arc["choices"]) == {"text", "label"}
    mmlu = _head(converted / "cais/mmlu/anatomy/test.jsonl", 1)[0]
    assert set(mmlu) == {"question", "subject", "choices", "answer"}
    assert mmlu["subject"] == "anatomy" and len(mmlu["choices"]) == 4 and mmlu["answer"] in range(4)
    mc = _head(converted / "truthfulqa/truthful_qa/multiple_choice/validation.jsonl", 1)[0]
    assert mc["mc1_targets"]["labels"][0] == 1 and sum(mc["mc1_targets"]["labels"]) == 1
    obqa = list(_read_jsonl(converted / "allenai/openbookqa/main/test.jsonl"))
    assert all(len(r["choices"]["text"]) == 4 and r["answerKey"] in r["choices"]["label"] for r in obqa)


def test_wikitext_pages_start_at_level_one_headings() -> None:
    raw = " \n = A = \n \n text a \n = = Sub = = \n more \n = B = \n text b \n"
    assert converters.wikitext_pages(raw) == [" = A = \n \n text a \n = = Sub = = \n more ", " = B = \n text b \n"]


def test_winogrande_rebuild_renders_the_same_contexts() -> None:
    doc = converters.rebuild_winogrande(["The cat chased the Samantha", "The cat chased the Sarah"], "ran off.", 1)
    assert doc == {
        "sentence": "The cat chased the _ ran off.",
        "option1": "Samantha",
        "option2": "Sarah",
        "answer": "2",
    }


def test_hellaswag_context_split_heuristic() -> None:
    assert converters.split_hellaswag_context("A man sits. he") == ("A man sits.", "he")
    assert converters.split_hellaswag_context("A man sits. He stands.") == ("A man sits. He stands.", "")
    assert converters.split_openbookqa_choices("(A) a b (B) c (C) d (D) e") == {
        "text": ["a b", "c", "d", "e"],
        "label": ["A", "B", "C", "D"],
    }


def test_import_only_and_errors(shared_data: Path, tmp_path: Path) -> None:
    assert data_import.import_benchmarks(shared_data, tmp_path, only=["copa"]) == ["copa"]
    assert [p.name for p in tmp_path.rglob("*.jsonl")] == ["validation.jsonl"]
    with pytest.raises(UserError, match="Unknown benchmark"):
        data_import.import_benchmarks(shared_data, tmp_path, only=["nope"])
    with pytest.raises(UserError, match="missing"):
        data_import.import_benchmarks(tmp_path, tmp_path / "out", only=["copa"])
    with pytest.raises(UserError, match="No benchmark folders"):
        data_import.import_benchmarks(tmp_path / "aps", tmp_path / "out")


def test_import_command_line(shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert data_import.main(["--from", str(shared_data), "--to", str(tmp_path), "--only", "gsm8k,lambada"]) == 0
    assert "ASSAY_DATASETS_DIR" in capsys.readouterr().out
    assert (tmp_path / "openai/gsm8k/main/train.jsonl").is_file()
    assert data_import.main(["--from", str(tmp_path / "none"), "--to", str(tmp_path)]) == 1


# ---------------------------------------------------------------- datasets_local


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def test_local_folder_serves_the_hub_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    _write(second / "org/ds/cfg/test.jsonl", [{"x": 1}, {"x": 2}])
    _write(second / "org/ds/cfg/dev.jsonl", [{"x": 3}])
    _write(second / "org/plain/default/validation.jsonl", [{"y": "a"}])
    monkeypatch.setenv(datasets_local.ENV_VAR, os.pathsep.join([str(first), str(second)]))

    real_load = datasets.load_dataset
    builders: list[str] = []

    def only_packaged_builders(path: str, *args: Any, **kwargs: Any) -> Any:
        builders.append(path)
        assert path in {"json", "parquet", "csv"}, f"the hub was asked for {path}"
        return real_load(path, *args, **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", only_packaged_builders)

    loaded = datasets_local.load_task_dataset("org/ds", "cfg", {"revision": "abc"})
    assert sorted(loaded) == ["dev", "test"] and loaded["test"]["x"] == [1, 2]
    assert datasets_local.load_task_dataset("org/plain")["validation"]["y"] == ["a"]

    # The first root that has the dataset wins; parquet and csv files work too.
    (first / "org/ds/cfg").mkdir(parents=True)
    datasets.Dataset.from_list([{"x": 9}]).to_parquet(str(first / "org/ds/cfg/test.parquet"))
    (first / "org/ds/cfg/train.csv").write_text("x\n7\n", encoding="utf-8")
    loaded = datasets_local.load_task_dataset("org/ds", "cfg")
    assert sorted(loaded) == ["test", "train"]
    assert loaded["test"]["x"] == [9] and loaded["train"]["x"] == [7]
    assert set(builders) == {"json", "parquet", "csv"}


def test_without_local_files_the_normal_loader_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(datasets_local.ENV_VAR, raising=False)
    data = tmp_path / "rows.jsonl"
    _write(data, [{"q": "a"}, {"q": "b"}])
    loaded = datasets_local.load_task_dataset(
        "json", None, {"data_files": {"test": str(data)}, "trust_remote_code": True}
    )
    assert loaded["test"]["q"] == ["a", "b"]


def test_unreachable_hub_is_a_user_error_saying_where_the_data_comes_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(datasets_local.ENV_VAR, str(tmp_path / "absent"))

    def offline(path: str, name: str | None = None, **kwargs: Any) -> None:
        raise ConnectionError(f"Couldn't reach '{path}' on the Hub (OfflineModeIsEnabled)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(UserError) as err:
        datasets_local.load_task_dataset("allenai/sciq")
    assert str(err.value) == (
        f"Dataset allenai/sciq is neither under ASSAY_DATASETS_DIR ({tmp_path / 'absent'}: no such folder) nor in the local "
        "datasets cache, and the Hugging Face hub cannot be reached (Couldn't reach 'allenai/sciq' on the Hub "
        "(OfflineModeIsEnabled)); `assay data import` cannot build it: its data comes from the Hugging Face hub, so run "
        "datasets.load_dataset('allenai/sciq') once on a machine that reaches the hub and set HF_DATASETS_CACHE to a "
        "datasets cache that holds it (a copy of that machine's), write its splits yourself as "
        "allenai/sciq/default/<split>.jsonl in a folder named by ASSAY_DATASETS_DIR, or run where the hub can be reached."
    )
    with pytest.raises(
        UserError, match=r"\(`assay data import --from <benchmark files> --to <folder> --only mmlu` writes one\)"
    ):
        datasets_local.load_task_dataset("cais/mmlu", "anatomy")


def test_every_folder_an_import_writes_is_declared_by_its_benchmark(converted: Path) -> None:
    """`benchmark_writing` (which errors use to suggest `--only <name>`) knows every folder the converters write."""
    folders = {path.parent.relative_to(converted).as_posix() for path in converted.rglob("*.jsonl")}
    assert {folder: converters.benchmark_writing(folder) is not None for folder in folders} == dict.fromkeys(
        folders, True
    )
    assert converters.benchmark_writing("allenai/sciq/default") is None
    assert converters.benchmark_writing("cais/mmlu/anatomy") == "mmlu"


def test_converted_data_loads_through_assay_datasets_dir(converted: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(datasets_local.ENV_VAR, str(converted))
    mmlu = datasets_local.load_task_dataset("cais/mmlu", "anatomy")
    assert {split: len(rows) for split, rows in mmlu.items()} == {"dev": 5, "test": 135, "validation": 14}
    arc = datasets_local.load_task_dataset("allenai/ai2_arc", "ARC-Challenge")
    assert len(arc["test"]) == 1172 and arc["test"][0]["choices"]["label"] == ["A", "B", "C", "D"]
