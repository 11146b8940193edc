"""Assay's task library (tasks/) against lm-eval's built-in tasks.

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

import random
from pathlib import Path
from typing import Any

import pytest

datasets = pytest.importorskip("datasets")
lm_eval_tasks = pytest.importorskip("lm_eval.tasks", reason="lm-eval (dev extra) is the reference")

from assay.runner.data import local as datasets_local  # noqa: E402
from tests.engine.task_library_names import HANDMADE, OUR_TASKS, TASKS_DIR  # noqa: E402
from tests.helpers import head_jsonl as _head  # noqa: E402

LMEVAL_TASKS = Path(lm_eval_tasks.__file__).resolve().parent
# The built-in folders our tasks correspond to (indexing all of lm-eval takes seconds).
LMEVAL_FOLDERS = [
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
    "sciq",
    "openbookqa",
]
ROWS_SERVED = 40
FIRST_DOCS = 3

MMLU_CATEGORIES = ["mmlu_stem", "mmlu_other", "mmlu_social_sciences", "mmlu_humanities"]
HEADLINE_TASKS = [
    "hellaswag",
    "arc_easy",
    "arc_challenge",
    "piqa",
    "winogrande",
    "boolq",
    "lambada_openai",
    "lambada_standard",
    "wikitext",
    "gsm8k",
    "gsm8k_cot",
    "truthfulqa_mc1",
    "truthfulqa_mc2",
    "truthfulqa_gen",
    "sciq",
    "openbookqa",
    "copa",
]


# ---------------------------------------------------------------- fixtures


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


def _normalised_config(task: Any) -> dict[str, Any]:
    cfg = task.config.to_dict(keep_callable=True)
    cfg.get("metadata", {}).pop("config_source", None)
    cfg.get("metadata", {}).pop("sentinels_skip", None)  # Assay's own: which sentinels do not apply

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
        "arc_challenge",
        "hellaswag",
        "mmlu",
        "truthfulqa_mc2",
        "winogrande",
        "gsm8k",
    ]
    # Running a child alone keeps its own default.
    assert _load_one(ours, "arc_challenge").config.num_fewshot is None
