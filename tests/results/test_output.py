"""Results JSON and samples JSONL: same names, keys and bytes as lm-eval's EvaluationTracker."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from lm_eval.loggers.evaluation_tracker import EvaluationTracker as LmTracker
from lm_eval.utils import handle_non_serializable, sanitize_model_name, sanitize_task_name

from assay.runner.results import output

DATE = re.compile(r"\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.\d+")


def _sample(doc_id: int, task_value: float) -> dict:
    return {
        "doc_id": doc_id,
        "doc": {"q": f"question {doc_id}", "gold": doc_id % 2, "ünï": "çödé"},
        "target": doc_id % 2,
        "arguments": [("Q:", " yes"), ("Q:", " no")],
        "resps": [[(-1.5, False)], [(np.float64(-0.25), np.bool_(True))]],
        "filtered_resps": [(-1.5, False), (-0.25, True)],
        "filter": "none",
        "metrics": ["acc"],
        "doc_hash": f"d{doc_id}",
        "prompt_hash": f"p{doc_id}",
        "target_hash": f"t{doc_id}",
        "acc": task_value,
    }


def _results() -> dict:
    return {
        "results": {
            "task_b": {"alias": "task_b", "acc,none": np.float64(0.5), "acc_stderr,none": "N/A"},
            "task_a": {"alias": "task_a", "acc,none": 1.0},
        },
        "configs": {"task_a": {"task": "task_a", "tags": {"x"}}, "task_b": {"task": "task_b"}},
        "versions": {"task_a": 1.0, "task_b": 1.0},
        "n-samples": {"task_a": {"original": np.int64(3), "effective": 2}},
        "config": {"model": "hf", "model_dtype": torch.float16, "path": Path("/x")},
    }


SAMPLES = {"task_a": [_sample(0, 1.0), _sample(1, 0.0)], "task_b": [_sample(0, np.float32(0.5))]}
MODEL_ARGS = {"pretrained": "org/My:Model[v1]", "dtype": "float16"}


def _lm_eval_files(out: Path, system_instruction=None, chat_template=None) -> tuple[dict, dict]:
    tracker = LmTracker(output_path=str(out))
    tracker.general_config_tracker.log_experiment_args(
        model_source="hf",
        model_args=MODEL_ARGS,
        system_instruction=system_instruction,
        chat_template=chat_template,
        fewshot_as_multiturn=False,
    )
    results = _results()
    samples = copy.deepcopy(SAMPLES)
    tracker.save_results_aggregated(results=results, samples=samples)
    for task in results["configs"]:
        tracker.save_results_samples(task_name=task, samples=samples[task])
    return _read_tree(out)


def _assay_files(out: Path, system_instruction=None, chat_template=None) -> tuple[dict, dict]:
    tracker = output.EvaluationTracker(str(out))
    saved = tracker.save(
        _results(),
        copy.deepcopy(SAMPLES),
        model_source="hf",
        model_args=MODEL_ARGS,
        system_instruction=system_instruction,
        chat_template=chat_template,
        fewshot_as_multiturn=False,
    )
    assert saved.results_path is not None and saved.results_path.is_file()
    return _read_tree(out)


def _read_tree(root: Path) -> tuple[dict, dict]:
    """{relative name with the date masked: text}, with the elapsed-time value masked."""
    texts, parsed = {}, {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        name = DATE.sub("<date>", path.relative_to(root).as_posix())
        text = path.read_text(encoding="utf-8")
        text = re.sub(r'"total_evaluation_time_seconds": "[0-9.e-]+"', '"total_evaluation_time_seconds": "<t>"', text)
        texts[name] = text
        parsed[name] = [json.loads(line) for line in text.splitlines()] if name.endswith(".jsonl") else json.loads(text)
    return texts, parsed


@pytest.mark.parametrize("system_instruction,chat_template", [(None, None), ("Be brief.", "{{ messages }}")])
def test_directory_output_matches_lm_eval(tmp_path, system_instruction, chat_template):
    lm_texts, lm_parsed = _lm_eval_files(tmp_path / "lm", system_instruction, chat_template)
    texts, parsed = _assay_files(tmp_path / "assay", system_instruction, chat_template)
    assert (
        sorted(texts)
        == sorted(lm_texts)
        == [
            "org__My__Model__v1__/results_<date>.json",
            "org__My__Model__v1__/samples_task_a_<date>.jsonl",
            "org__My__Model__v1__/samples_task_b_<date>.jsonl",
        ]
    )
    for name in texts:
        assert list(parsed[name]) == list(lm_parsed[name]) if isinstance(parsed[name], dict) else True
        assert texts[name] == lm_texts[name], name


def test_json_output_path_form(tmp_path):
    _lm_eval_files(tmp_path / "lm" / "res.json")
    _assay_files(tmp_path / "assay" / "res.json")
    lm_names = sorted(DATE.sub("<date>", p.name) for p in (tmp_path / "lm").iterdir())
    names = sorted(DATE.sub("<date>", p.name) for p in (tmp_path / "assay").iterdir())
    assert names == lm_names == ["res_<date>.json", "samples_task_a_<date>.jsonl", "samples_task_b_<date>.jsonl"]


def test_results_and_samples_share_one_date_id(tmp_path):
    saved = output.EvaluationTracker(tmp_path).save(
        _results(), copy.deepcopy(SAMPLES), model_source="hf", model_args=MODEL_ARGS
    )
    assert saved.results_path.name == f"results_{saved.date_id}.json"
    assert [p.name for p in saved.sample_paths] == [
        f"samples_task_a_{saved.date_id}.jsonl",
        f"samples_task_b_{saved.date_id}.jsonl",
    ]


def test_no_output_path_still_completes_results():
    results = _results()
    saved = output.EvaluationTracker(None).save(results, None, model_source="dummy", model_args="")
    assert saved.results_path is None
    assert results["task_hashes"] == {}
    assert results["model_name"] == results["model_name_sanitized"] == "dummy"


@pytest.mark.parametrize(
    "model_args,folder",
    [
        ("pretrained=../model", "__model"),  # lm-eval: ..__model, a hidden folder
        ("pretrained=./model", "__model"),
        ("pretrained=.", "model"),
        ("pretrained=org/name", "org__name"),  # as lm-eval
        ("pretrained=/abs/model", "__abs__model"),  # as lm-eval
    ],
)
def test_a_model_paths_folder_is_lm_evals_name_never_hidden(model_args: str, folder: str, tmp_path: Path) -> None:
    results = _results()
    saved = output.EvaluationTracker(str(tmp_path)).save(results, None, model_source="hf", model_args=model_args)
    assert saved.results_path is not None and saved.results_path.parent == tmp_path / folder
    assert results["model_name"] == model_args.split("=", 1)[1]


def test_evaluator_logged_args_win_over_fallback():
    tracker = output.EvaluationTracker(None)
    tracker.general_config_tracker.log_experiment_args(
        model_source="hf",
        model_args="pretrained=gpt2,dtype=float32",
        system_instruction=None,
        chat_template="TEMPLATE",
        fewshot_as_multiturn=True,
    )
    results: dict = {}
    tracker.save(results, None, model_source="x", model_args={}, chat_template=None)
    assert results["chat_template"] == "TEMPLATE"
    assert results["chat_template_sha"] == output.sha256("TEMPLATE")
    assert results["model_name"] == "gpt2"


@pytest.mark.parametrize("name", ["gpt2", "org/model", 'a"b<c>d:e/f|g\\h?i*j[k]l', "x::y//z", "ünï/cödé"])
def test_sanitize_like_lm_eval(name):
    assert output.sanitize_model_name(name) == sanitize_model_name(name)
    assert output.sanitize_task_name(name) == sanitize_task_name(name)


@pytest.mark.parametrize(
    "model_args",
    [
        {"peft": "a", "pretrained": "b"},
        {"model": "m"},
        "pretrained=gpt2,dtype=float32",
        "engine=davinci",
        "delta=x,pretrained=y",
        {},
        "",
    ],
)
def test_model_name_lookup_like_lm_eval(model_args):
    from lm_eval.loggers.evaluation_tracker import GeneralConfigTracker

    assert output.model_name_from_args(model_args) == GeneralConfigTracker._get_model_name(model_args)


@pytest.mark.parametrize(
    "value",
    [
        np.bool_(True),
        np.int32(3),
        np.int64(4),
        np.float32(0.5),
        np.float64(0.25),
        {1, 2},
        torch.tensor(1.5),
        torch.float16,
        Path("/p"),
        object,
    ],
)
def test_json_default_like_lm_eval(value):
    assert output.json_default(value) == handle_non_serializable(value)
