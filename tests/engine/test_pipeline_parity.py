"""Assay's pipeline against lm-eval's on real benchmark data, with one deterministic model.

Both harnesses load the same task YAMLs (through include_path) and the same local files,
and query the same hash-defined model (see fake_lm.py), so every metric, stderr, group
value and logged prompt must agree.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from assay.runner.evaluator import simple_evaluate
from assay.runner.tasks.index import TaskManager
from tests.engine.fake_lm import AssayFakeLM, lmeval_fake_lm

lm_eval = pytest.importorskip("lm_eval")
import lm_eval.tasks  # noqa: E402  (submodule used below; not imported by the package)


def _write_tasks(root: Path, data: Path, work: Path) -> None:
    arc = {"train": str(data / "arc/ARC-Easy-Dev.jsonl"), "test": str(data / "arc/ARC-Easy-Test.jsonl")}
    gsm = {"train": str(data / "gsm8k/train.jsonl"), "test": str(data / "gsm8k/test.jsonl")}
    lambada = {"test": str(data / "lambada/lambada_test.jsonl")}
    wino = {"test": str(data / "winogrande/winogrande.jsonl")}
    boolq_rows = [json.loads(line) for line in (data / "boolq/val.jsonl").read_text().splitlines()[:200]]
    boolq_file = work / "boolq.jsonl"
    boolq_file.write_text("".join(json.dumps({**row, "label": int(row["label"] in (True, "true"))}) + "\n" for row in boolq_rows))
    files = {
        "arc.yaml": f"""
task: p_arc
dataset_path: json
dataset_kwargs: {{data_files: {json.dumps(arc)}}}
training_split: train
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{{{question.stem}}}}\\nAnswer:"
doc_to_choice: "{{{{question.choices | map(attribute='text') | list}}}}"
doc_to_target: "{{{{(question.choices | map(attribute='label') | list).index(answerKey)}}}}"
metric_list:
  - {{metric: acc, aggregation: mean, higher_is_better: true}}
  - {{metric: acc_norm, aggregation: mean, higher_is_better: true}}
  - {{metric: acc_bytes, aggregation: mean, higher_is_better: true}}
  - {{metric: acc_mutual_info, aggregation: mean, higher_is_better: true}}
  - {{metric: brier_score, higher_is_better: false}}
metadata: {{version: 1.0}}
""",
        "gsm.yaml": f"""
task: p_gsm
dataset_path: json
dataset_kwargs: {{data_files: {json.dumps(gsm)}}}
training_split: train
test_split: test
fewshot_split: train
output_type: generate_until
num_fewshot: 3
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{answer.split('####')[-1].strip()}}}}"
generation_kwargs:
  until: ["Question:", "</s>"]
  do_sample: false
  temperature: 0.0
filter_list:
  - name: strict-match
    filter:
      - {{function: regex, regex_pattern: "#### (\\\\-?[0-9\\\\.\\\\,]+)"}}
      - {{function: take_first}}
  - name: flexible-extract
    filter:
      - {{function: regex, group_select: -1, regex_pattern: "(-?[$0-9.,]{{2,}})|(-?[0-9]+)"}}
      - {{function: take_first}}
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    ignore_case: true
    ignore_punctuation: false
    regexes_to_ignore: [",", "\\\\$", "(?s).*#### ", "\\\\.$"]
metadata: {{version: 3.0}}
""",
        "lambada.yaml": f"""
task: p_lambada
dataset_path: json
dataset_kwargs: {{data_files: {json.dumps(lambada)}}}
test_split: test
output_type: loglikelihood
doc_to_text: "{{{{text.split(' ')[:-1]|join(' ')}}}}"
doc_to_target: "{{{{' '+text.split(' ')[-1]}}}}"
metric_list:
  - {{metric: perplexity, aggregation: perplexity, higher_is_better: false}}
  - {{metric: acc, aggregation: mean, higher_is_better: true}}
""",
        "rolling.yaml": f"""
task: p_rolling
dataset_path: json
dataset_kwargs: {{data_files: {json.dumps(lambada)}}}
test_split: test
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{{{text}}}}"
metric_list:
  - {{metric: word_perplexity}}
  - {{metric: byte_perplexity}}
  - {{metric: bits_per_byte}}
""",
        "wino.yaml": f"""
task: p_wino
dataset_path: json
dataset_kwargs: {{data_files: {json.dumps(wino)}}}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{gold}}}}"
doc_to_choice: "{{{{context_options}}}}"
doc_to_target: "{{{{continuation}}}}"
metric_list:
  - {{metric: acc, aggregation: mean, higher_is_better: true}}
""",
        "boolq.yaml": f"""
task: p_boolq
dataset_path: json
dataset_kwargs: {{data_files: {{validation: {str(boolq_file)!r}}}}}
validation_split: validation
output_type: multiple_choice
doc_to_text: "{{{{passage}}}}\\nQuestion: {{{{question}}}}?\\nAnswer:"
doc_to_choice: ["no", "yes"]
doc_to_target: label
metric_list:
  - {{metric: acc}}
  - {{metric: f1}}
  - {{metric: mcc}}
""",
        "group.yaml": """
group: p_group
task:
  - p_arc
  - p_lambada
  - task: p_wino
    task_alias: wino with alias
aggregate_metric_list:
  - metric: acc
    weight_by_size: true
metadata: {version: 2.0}
""",
    }
    for name, text in files.items():
        (root / name).write_text(text)


@pytest.fixture(scope="module")
def task_dir(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tasks")
    _write_tasks(root, shared_data, tmp_path_factory.mktemp("work"))
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


def _close(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, str) or isinstance(b, str):
            return a == b
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def _assert_rows_equal(ours: dict, theirs: dict) -> None:
    assert set(ours["results"]) == set(theirs["results"])
    for name, row in theirs["results"].items():
        assert set(ours["results"][name]) == set(row), name
        for key, value in row.items():
            assert _close(ours["results"][name][key], value), (name, key, ours["results"][name][key], value)
    for key in ("group_subtasks", "n-shot", "n-samples", "higher_is_better"):
        assert json.loads(json.dumps(ours[key])) == json.loads(json.dumps(theirs[key])), key
    assert set(ours.get("groups", {})) == set(theirs.get("groups", {}))


def _jsonish(value):
    return json.loads(json.dumps(value, default=str))


def _assert_samples_equal(ours: dict, theirs: dict) -> None:
    for task, rows in theirs["samples"].items():
        assert len(ours["samples"][task]) == len(rows)
        for mine, ref in zip(ours["samples"][task], rows):
            for key in ("doc_id", "target", "arguments", "filter", "metrics", "doc_hash", "prompt_hash", "target_hash"):
                assert _jsonish(mine[key]) == _jsonish(ref[key]), (task, key)
            for key in ("resps", "filtered_resps"):
                assert _jsonish(mine[key]) == _jsonish(ref[key]), (task, key)


def test_multiple_choice_generation_and_group_match_lm_eval(task_dir: Path) -> None:
    ours, theirs = _both(task_dir, ["p_group", "p_gsm", "p_boolq"], limit=30, bootstrap_iters=500)
    _assert_rows_equal(ours, theirs)
    _assert_samples_equal(ours, theirs)
    assert ours["groups"]["p_group"]["acc,none"] == pytest.approx(theirs["groups"]["p_group"]["acc,none"], rel=1e-12)


def test_fewshot_and_rolling_match_lm_eval(task_dir: Path) -> None:
    ours, theirs = _both(task_dir, ["p_arc", "p_rolling", "p_lambada"], num_fewshot=5, limit=25, bootstrap_iters=2000)
    _assert_rows_equal(ours, theirs)
    _assert_samples_equal(ours, theirs)


def test_system_instruction_samples_and_fraction_limit_match_lm_eval(task_dir: Path) -> None:
    ours, theirs = _both(
        task_dir,
        ["p_arc", "p_gsm"],
        samples={"p_arc": [3, 1, 7], "p_gsm": [0, 5]},
        system_instruction="You are a careful grader.",
        bootstrap_iters=0,
    )
    _assert_rows_equal(ours, theirs)
    _assert_samples_equal(ours, theirs)
    ours, theirs = _both(task_dir, ["p_wino"], limit=0.01, num_fewshot=2, bootstrap_iters=100)
    _assert_rows_equal(ours, theirs)
    _assert_samples_equal(ours, theirs)


def test_predict_only_and_gen_kwargs_match_lm_eval(task_dir: Path) -> None:
    ours, theirs = _both(task_dir, ["p_gsm"], limit=5, predict_only=True, gen_kwargs="max_gen_toks=16,temperature=0")
    _assert_rows_equal(ours, theirs)
    _assert_samples_equal(ours, theirs)


def _write_field_tasks(root: Path, data: Path) -> None:
    import shutil

    shutil.copy(Path(__file__).parent / "yaml_fields" / "utils.py", root / "utils.py")
    arc = {"train": str(data / "arc/ARC-Easy-Dev.jsonl"), "test": str(data / "arc/ARC-Easy-Test.jsonl")}
    gsm = {"train": str(data / "gsm8k/train.jsonl"), "test": str(data / "gsm8k/test.jsonl")}
    (root / "base.yaml").write_text(f"""
dataset_path: json
dataset_kwargs: {{data_files: {json.dumps(arc)}}}
training_split: train
test_split: test
process_docs: !function utils.process_docs
""")
    (root / "fields.yaml").write_text("""
include: base.yaml
task: f_functions
task_alias: functions and delimiters
tag: [f_tag]
output_type: multiple_choice
description: "Answer about {{stem[:10]}}.\\n\\n"
doc_to_text: !function utils.doc_to_text
doc_to_choice: !function utils.doc_to_choice
doc_to_target: !function utils.doc_to_target
target_delimiter: "  "
fewshot_delimiter: "\\n###\\n"
fewshot_config:
  sampler: first_n
metadata: {version: 4.0}
""")
    (root / "custom_results.yaml").write_text("""
include: base.yaml
task: f_process_results
tag: [f_tag]
output_type: multiple_choice
doc_to_text: "{{stem}}"
doc_to_choice: !function utils.doc_to_choice
doc_to_target: "{{labels.index(answerKey)}}"
process_results: !function utils.process_results
fewshot_config:
  samples: !function utils.fixed_shots
  doc_to_text: "Example: {{stem}}"
metric_list:
  - {metric: custom_acc, aggregation: mean, higher_is_better: true}
  - {metric: margin, aggregation: median, higher_is_better: true}
""")
    (root / "gen.yaml").write_text(f"""
task: f_generation
dataset_path: json
dataset_kwargs: {{data_files: {json.dumps(gsm)}}}
training_split: train
test_split: test
output_type: generate_until
repeats: 3
gen_prefix: "Let's think."
doc_to_text: "Question: {{{{question}}}}"
doc_to_target: "{{{{answer.split('####')[-1].strip()}}}}"
generation_kwargs: {{until: ["\\n\\n"], do_sample: false, max_gen_toks: 32}}
filter_list:
  - name: vote
    filter:
      - {{function: regex, regex_pattern: "(-?[0-9]+)", group_select: 0}}
      - {{function: majority_vote}}
      - {{function: take_first}}
  - name: firsts
    filter:
      - {{function: lowercase}}
      - {{function: take_first_k, k: 2}}
      - {{function: take_first}}
metric_list:
  - {{metric: exact_match, aggregation: mean, higher_is_better: true, ignore_case: true}}
""")
    (root / "targets.yaml").write_text("""
include: base.yaml
task: f_multi_target
num_fewshot: 0
output_type: multiple_choice
doc_to_text: "{{stem}}\\nAnswer:"
doc_to_choice: "{{question.choices | map(attribute='text') | list}}"
doc_to_target: "{{[labels.index(answerKey), 0]}}"
""")


@pytest.fixture(scope="module")
def field_task_dir(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("field_tasks")
    _write_field_tasks(root, shared_data)
    return root


def test_yaml_fields_match_lm_eval(field_task_dir: Path) -> None:
    """include, !function everywhere, description template, delimiters, first_n and
    fixed few-shot samples, process_results, repeats + majority vote, gen_prefix, tags,
    multiple targets."""
    ours, theirs = _both(field_task_dir, ["f_tag", "f_generation", "f_multi_target"], num_fewshot=2, limit=12, bootstrap_iters=300)
    _assert_rows_equal(ours, theirs)
    _assert_samples_equal(ours, theirs)
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
    _assert_rows_equal(ours, theirs)
    _assert_samples_equal(ours, theirs)
    assert ours["samples"]["p_arc"][0]["arguments"][0][0].startswith("<|system|>Be brief.")
    ours, theirs = _both(field_task_dir, ["f_generation"], num_fewshot=1, limit=4, apply_chat_template=True, fewshot_as_multiturn=multiturn)
    _assert_samples_equal(ours, theirs)
