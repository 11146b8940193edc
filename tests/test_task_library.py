"""Assay's task library (tasks/) against lm-eval's built-in tasks, plus the offline data path.

The parity tests use lm-eval's own machinery on both sides: a TaskManager over *our*
tasks/ folder only, and one over the matching built-in lm-eval task folders. Both build
the same task by name from the same documents, and we compare what a model would be asked:
the rendered requests (few-shot context, continuation or generation arguments), targets,
choices and the parsed task config.

The documents come from Assay's shared benchmark data, converted by our importer into
the ASSAY_DATASETS_DIR layout. `datasets.load_dataset` is monkeypatched to serve those
files for the hub ids: the patch stands in for the Hugging Face hub, which the tests never
contact. To stay fast it serves only the first rows of each split, and fills a split the
shared data lacks (e.g. HellaSwag's train split) with a copy of one it has, so that tasks
whose YAML names a few-shot split can still be built. Datasets with no shared data at all
(SciQ, the original LAMBADA) are served from tiny hand-made documents below.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any, Iterator

import pytest

datasets = pytest.importorskip("datasets")
lm_eval_tasks = pytest.importorskip("lm_eval.tasks", reason="lm-eval (dev extra) is the reference")

from assay.errors import UserError  # noqa: E402
from assay.runner.data import converters
from assay.runner.data import importer as data_import
from assay.runner.data import local as datasets_local  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TASKS_DIR = REPO / "tasks"
LMEVAL_TASKS = Path(lm_eval_tasks.__file__).resolve().parent
# The built-in folders our tasks correspond to (indexing all of lm-eval takes seconds).
LMEVAL_FOLDERS = [
    "hellaswag", "arc", "piqa", "winogrande", "super_glue/boolq", "super_glue/copa", "lambada",
    "wikitext", "mmlu/default", "gsm8k", "truthfulqa", "sciq", "openbookqa",
]
ROWS_SERVED = 40
FIRST_DOCS = 3

MMLU_CATEGORIES = ["mmlu_stem", "mmlu_other", "mmlu_social_sciences", "mmlu_humanities"]
HEADLINE_TASKS = [
    "hellaswag", "arc_easy", "arc_challenge", "piqa", "winogrande", "boolq", "lambada_openai",
    "lambada_standard", "wikitext", "gsm8k", "gsm8k_cot", "truthfulqa_mc1", "truthfulqa_mc2",
    "truthfulqa_gen", "sciq", "openbookqa", "copa",
]

# Hand-made documents for datasets that shared/data does not have, in the hub's schema.
HANDMADE: dict[tuple[str, str | None], list[dict[str, Any]]] = {
    ("allenai/sciq", None): [
        {
            "question": "What type of organism is commonly used in preparation of foods such as cheese and yogurt?",
            "distractor3": "viruses", "distractor1": "protozoa", "distractor2": "gymnosperms",
            "correct_answer": "mesophilic organisms",
            "support": " Mesophiles grow best in moderate temperature, typically between 25°C and 40°C.",
        },
        {
            "question": "What is the least dangerous radioactive decay?",
            "distractor3": "zeta decay", "distractor1": "beta decay", "distractor2": "gamma decay",
            "correct_answer": "alpha decay",
            "support": "All radioactive decay is dangerous to living things, but alpha decay is the least dangerous.",
        },
    ],
    ("cimec/lambada", None): [
        {"text": "she shook her head and looked away , refusing to meet his eyes", "domain": "Romance"},
        {"text": "the old man closed the door behind him and sat down by the fire", "domain": None},
    ],
}


def _read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


def _head(path: Path, n: int) -> list[dict[str, Any]]:
    rows = []
    for row in _read_jsonl(path):
        rows.append(row)
        if len(rows) == n:
            break
    return rows


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def converted(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("assay_datasets")
    data_import.import_benchmarks(shared_data, dst)
    return dst


@pytest.fixture(scope="session")
def hub_cache() -> dict[tuple[str, str | None], Any]:
    return {}


@pytest.fixture
def fake_hub(converted: Path, hub_cache: dict[tuple[str, str | None], Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Route `datasets.load_dataset(<hub id>, <config>)` to the converted files (no network)."""

    def load_dataset(path: str | None = None, name: str | None = None, **_: Any) -> Any:
        key = (path, name)
        if key not in hub_cache:
            if key in HANDMADE:
                splits = {"test": HANDMADE[key], "validation": HANDMADE[key]}
            else:
                files = datasets_local.find_local_files(path, name, roots=[converted])
                assert files is not None, f"the test hub has no data for {path} / {name}"
                splits = {split: _head(file, ROWS_SERVED) for split, file in files.items()}
            first = next(iter(splits.values()))
            for split in ("train", "validation", "test"):
                splits.setdefault(split, first)
            hub_cache[key] = datasets.DatasetDict({s: datasets.Dataset.from_list(rows) for s, rows in splits.items()})
        return hub_cache[key]

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)


@pytest.fixture(scope="session")
def ours() -> Any:
    return lm_eval_tasks.TaskManager(include_path=str(TASKS_DIR), include_defaults=False)


@pytest.fixture(scope="session")
def reference() -> Any:
    paths = [str(LMEVAL_TASKS / folder) for folder in LMEVAL_FOLDERS]
    return lm_eval_tasks.TaskManager(include_path=paths, include_defaults=False)


def _our_index() -> dict[str, Any]:
    from lm_eval.tasks._index import TaskIndex

    return TaskIndex.build([TASKS_DIR])


OUR_TASKS = sorted(name for name, entry in _our_index().items() if entry.kind.name == "TASK")


def _normalised_config(task: Any) -> dict[str, Any]:
    cfg = task.config.to_dict(keep_callable=True)
    cfg.get("metadata", {}).pop("config_source", None)

    def scrub(value: Any) -> Any:
        if callable(value):
            return "<function>"
        if isinstance(value, dict):
            return {k: scrub(v) for k, v in value.items()}
        if isinstance(value, list):
            return [scrub(v) for v in value]
        return value

    return scrub(cfg)


def _requests(task: Any, num_fewshot: int | None) -> list[tuple[str, tuple[Any, ...]]]:
    if num_fewshot is not None:
        task.set_config(key="num_fewshot", value=num_fewshot)
    task.set_fewshot_seed(seed=1234)
    task.build_all_requests(limit=FIRST_DOCS, rank=0, world_size=1)
    return [(inst.request_type, inst.arguments) for inst in task.instances]


def _load_one(manager: Any, name: str) -> Any:
    return manager.load(name)["tasks"][name]


# ---------------------------------------------------------------- library shape


def test_every_task_file_parses_with_lm_evals_loader() -> None:
    from lm_eval.tasks._yaml_loader import load_yaml

    files = sorted(TASKS_DIR.rglob("*.yaml")) + [TASKS_DIR / "mmlu/_default_template_yaml"]
    assert len(files) > 70
    for path in files:
        cfg = load_yaml(path, resolve_func=True)  # also imports every !function helper
        assert isinstance(cfg, dict) and ("task" in cfg or "group" in cfg or path.name.startswith("_default")), path


def test_library_has_every_headline_task_and_group(ours: Any) -> None:
    for name in HEADLINE_TASKS:
        assert name in ours.all_subtasks, name
    subjects = [t for t in ours.all_subtasks if t.startswith("mmlu_")]
    assert len(subjects) == 57
    assert set(ours.all_groups) == {"mmlu", *MMLU_CATEGORIES, "open_llm_leaderboard"}


def test_mmlu_generator_output_is_committed() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("mmlu_generate", TASKS_DIR / "mmlu/generate_configs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, text in module.render().items():
        assert (TASKS_DIR / "mmlu" / name).read_text(encoding="utf-8") == text, name


# ---------------------------------------------------------------- parity with lm-eval


@pytest.mark.parametrize("name", OUR_TASKS)
def test_task_renders_like_lm_eval(name: str, fake_hub: None, ours: Any, reference: Any) -> None:
    mine, theirs = _load_one(ours, name), _load_one(reference, name)
    assert _normalised_config(mine) == _normalised_config(theirs)
    assert mine.VERSION == theirs.VERSION and mine.OUTPUT_TYPE == theirs.OUTPUT_TYPE

    docs_mine, docs_theirs = list(mine.eval_docs)[:FIRST_DOCS], list(theirs.eval_docs)[:FIRST_DOCS]
    assert docs_mine == docs_theirs  # includes process_docs output
    for doc in docs_mine:
        assert mine.doc_to_text(doc) == theirs.doc_to_text(doc)
        assert mine.doc_to_target(doc) == theirs.doc_to_target(doc)
        if mine.config.doc_to_choice is not None:
            assert mine.doc_to_choice(doc) == theirs.doc_to_choice(doc)

    # Zero-shot, the task's own default and, unless the YAML pins zero shots, 2 and 5 shots.
    shots = {0, mine.config.num_fewshot or 0}
    if mine.config.num_fewshot != 0:
        pool = len(list(mine.fewshot_docs()))  # the hand-made sets are tiny
        shots |= {n for n in (2, 5) if n < pool}
    for n in sorted(shots):
        assert _requests(mine, n) == _requests(theirs, n), f"{name} at {n} shots"


def _fake_results(task: Any, doc: dict[str, Any]) -> list[Any]:
    rnd = random.Random(0)
    if task.OUTPUT_TYPE == "multiple_choice":
        return [(rnd.uniform(-20, -1), rnd.random() < 0.5) for _ in task.doc_to_choice(doc)]
    if task.OUTPUT_TYPE == "loglikelihood_rolling":
        return [rnd.uniform(-5000, -100)]
    if task.OUTPUT_TYPE == "generate_until":
        return [doc.get("correct_answers", ["#### 42"])[0] + " Q: next"]
    return [(rnd.uniform(-20, -1), True)]


@pytest.mark.parametrize("name", ["wikitext", "truthfulqa_mc2", "truthfulqa_gen", "truthfulqa_mc1", "gsm8k"])
def test_per_document_scores_match_lm_eval(name: str, fake_hub: None, ours: Any, reference: Any) -> None:
    if name == "truthfulqa_gen":
        pytest.importorskip("rouge_score")
    mine, theirs = _load_one(ours, name), _load_one(reference, name)
    for doc in list(mine.eval_docs)[:2]:
        results = _fake_results(mine, doc)
        assert mine.process_results(doc, results) == theirs.process_results(doc, results)


def test_mmlu_groups_match_lm_eval(fake_hub: None, ours: Any, reference: Any) -> None:
    mine, theirs = ours.load("mmlu"), reference.load("mmlu")
    assert mine["group_map"] == theirs["group_map"]
    assert sorted(mine["tasks"]) == sorted(theirs["tasks"])
    for group in mine["groups"]:
        a, b = mine["groups"][group], theirs["groups"][group]
        assert (a.alias, a.version, a.aggregate_metric_list) == (b.alias, b.version, b.aggregate_metric_list)
        assert a.aggregate_metric_list[0].weight_by_size is True


def test_open_llm_leaderboard_sets_shots_per_child(fake_hub: None, ours: Any) -> None:
    loaded = ours.load("open_llm_leaderboard")
    shots = {name: task.config.num_fewshot for name, task in loaded["tasks"].items()}
    expected = {"arc_challenge": 25, "hellaswag": 10, "truthfulqa_mc2": 0, "winogrande": 5, "gsm8k": 5}
    assert {k: shots[k] for k in expected} == expected
    subjects = {k: v for k, v in shots.items() if k.startswith("mmlu_")}
    assert len(subjects) == 57 and set(subjects.values()) == {5}
    assert loaded["group_map"]["open_llm_leaderboard"] == [
        "arc_challenge", "hellaswag", "mmlu", "truthfulqa_mc2", "winogrande", "gsm8k"
    ]
    # Running a child alone keeps its own default.
    assert _load_one(ours, "arc_challenge").config.num_fewshot is None


# ---------------------------------------------------------------- data_import


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
    assert doc == {"sentence": "The cat chased the _ ran off.", "option1": "Samantha", "option2": "Sarah", "answer": "2"}


def test_hellaswag_context_split_heuristic() -> None:
    assert converters.split_hellaswag_context("A man sits. he") == ("A man sits.", "he")
    assert converters.split_hellaswag_context("A man sits. He stands.") == ("A man sits. He stands.", "")
    assert converters.split_openbookqa_choices("(A) a b (B) c (C) d (D) e") == {
        "text": ["a b", "c", "d", "e"], "label": ["A", "B", "C", "D"]
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
    loaded = datasets_local.load_task_dataset("json", None, {"data_files": {"test": str(data)}, "trust_remote_code": True})
    assert loaded["test"]["q"] == ["a", "b"]


def test_unreachable_hub_is_a_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(datasets_local.ENV_VAR, raising=False)

    def offline(path: str, name: str | None = None, **kwargs: Any) -> None:
        raise ConnectionError(f"Couldn't reach '{path}' on the Hub (OfflineModeIsEnabled)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(UserError) as err:
        datasets_local.load_task_dataset("allenai/sciq")
    message = str(err.value)
    assert "allenai/sciq" in message and datasets_local.ENV_VAR in message and "assay data import" in message


def test_converted_data_loads_through_assay_datasets_dir(converted: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(datasets_local.ENV_VAR, str(converted))
    mmlu = datasets_local.load_task_dataset("cais/mmlu", "anatomy")
    assert {split: len(rows) for split, rows in mmlu.items()} == {"dev": 5, "test": 135, "validation": 14}
    arc = datasets_local.load_task_dataset("allenai/ai2_arc", "ARC-Challenge")
    assert len(arc["test"]) == 1172 and arc["test"][0]["choices"]["label"] == ["A", "B", "C", "D"]
