"""W&B (offline, real wandb) and Hugging Face Hub logging.

The Hub cannot be reached from tests: pushing is exercised against a closed local port
(a stand-in for "no network"), and the upload plan (what would go where) is checked
without the network.
"""

from __future__ import annotations

import copy
import re
import types

import pytest

from assay.errors import UsageError, UserError
from assay.extras import install_command
from assay.runner.results import loggers, output

RESULTS = {
    "results": {
        "task_a": {
            "alias": "task_a",
            "acc,none": 0.5,
            "acc_stderr,none": 0.1,
            "bleu,strict": 3.0,
            "bleu_stderr,strict": "N/A",
        },
        "grp": {"alias": "grp", "acc,none": 0.5, "acc_stderr,none": "N/A"},
    },
    "groups": {"grp": {"alias": "grp", "acc,none": 0.5, "acc_stderr,none": "N/A"}},
    "configs": {"task_a": {"task": "task_a", "output_type": "multiple_choice", "metric_list": [{"metric": "acc"}]}},
    "versions": {"task_a": 1.0, "grp": "N/A"},
    "n-shot": {"task_a": 0},
    "config": {"model": "dummy"},
}
SAMPLES = {
    "task_a": [
        {
            "doc_id": 0,
            "target": 1,
            "arguments": [("Q:", " a"), ("Q:", " b")],
            "resps": [[(-2.0, False)], [(-1.0, True)]],
            "filtered_resps": [(-2.0, False), (-1.0, True)],
            "acc": 1.0,
            "doc_hash": "d",
            "prompt_hash": "p",
            "target_hash": "t",
        },
    ]
}


def test_metric_split_matches_lm_eval():
    from lm_eval.loggers.wandb_logger import WandbLogger as LmWandb

    fake = types.SimpleNamespace(results=copy.deepcopy(RESULTS), task_names=list(RESULTS["results"]))
    lm_summary, lm_metrics = LmWandb._sanitize_results_dict(fake)
    summary, metrics = loggers.split_metrics(RESULTS["results"])
    assert summary == lm_summary
    assert metrics == lm_metrics


@pytest.mark.slow  # wandb's import and its offline run: about 6 s
def test_wandb_offline_run_logs_results_tables_and_artifacts(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb", reason="wandb is an optional extra (assay[wandb])")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    logger = loggers.WandbLogger({"project": "assay-test", "mode": "offline"}, {"extra": 1})
    logged = []
    original_log = logger.run.log
    monkeypatch.setattr(
        logger.run, "log", lambda data, step=None: (logged.append(dict(data)), original_log(data, step=step))
    )
    logger.post_init(RESULTS)
    logger.log_eval_result()
    logger.log_eval_samples(SAMPLES)
    assert logger.run.config["extra"] == 1
    assert logger.run.config["cli_configs"] == {"model": "dummy"}
    assert logger.run.summary["task_a/bleu_stderr,strict"] == "N/A"
    keys = {key for data in logged for key in data}
    assert {
        "task_a/acc",
        "task_a/acc_stderr",
        "task_a/bleu,strict",
        "evaluation/eval_results",
        "evaluation/group_eval_results",
        "task_a_eval_results",
    } <= keys
    table = next(data["evaluation/eval_results"] for data in logged if "evaluation/eval_results" in data)
    assert table.columns == ["Tasks", *loggers.WANDB_TABLE_COLUMNS]
    assert ["task_a", 1.0, "none", 0, "acc", "0.5", "0.1000"] in table.data
    samples_table = next(data["task_a_eval_results"] for data in logged if "task_a_eval_results" in data)
    assert samples_table.columns[:3] == ["id", "data", "choices"]
    logger.finish()
    assert list(tmp_path.rglob("*.wandb")), "offline run file was not written"
    assert wandb.run is None


def test_wandb_missing_package_is_one_sentence(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb":
            raise ModuleNotFoundError("No module named 'wandb'", name="wandb")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    sentence = f"--wandb_args needs the 'wandb' extra: {install_command('wandb')}."
    with pytest.raises(UserError, match=re.escape(sentence) + "$"):
        loggers.WandbLogger({"project": "x"})


def _saved(tmp_path):
    results = copy.deepcopy({k: v for k, v in RESULTS.items() if k != "groups"})
    return output.EvaluationTracker(tmp_path).save(
        results, copy.deepcopy(SAMPLES), model_source="hf", model_args={"pretrained": "org/model"}
    )


def test_hub_push_without_token_is_a_usage_error(monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with pytest.raises(UsageError, match="HF_TOKEN"):
        loggers.HubLogger({"hub_results_org": "me", "push_results_to_hub": True})


def test_hub_unknown_key_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown key"):
        loggers.HubLogger({"push_result_to_hub": True})


def test_hub_upload_plan_matches_lm_eval_layout(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    saved = _saved(tmp_path)
    hub = loggers.HubLogger(
        {
            "hub_results_org": "me",
            "details_repo_name": "details",
            "push_results_to_hub": True,
            "push_samples_to_hub": True,
        }
    )
    results_upload, samples_upload = hub.plan(saved)
    assert results_upload.repo_id == "me/details-private" and results_upload.private
    assert results_upload.path_in_repo == f"org/model/{saved.results_path.name}"
    assert results_upload.local == saved.results_path
    assert samples_upload.repo_id == "me/details-private" and samples_upload.is_folder
    assert samples_upload.path_in_repo == "org__model"
    assert sorted(p.name for p in samples_upload.local.iterdir()) == sorted(
        [saved.results_path.name] + [p.name for p in saved.sample_paths]
    )
    public = loggers.HubLogger(
        {"hub_results_org": "me", "results_repo_name": "res", "public_repo": True, "push_results_to_hub": True}
    )
    assert [u.repo_id for u in public.plan(saved)] == ["me/res"]


def test_hub_push_without_network_fails_in_one_sentence(tmp_path, monkeypatch):
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    saved = _saved(tmp_path)
    hub = loggers.HubLogger({"hub_results_org": "me", "push_results_to_hub": True}, endpoint="http://127.0.0.1:9")
    with pytest.raises(UserError) as caught:
        hub.push(saved)
    message = str(caught.value)
    assert "\n" not in message and "me/lm-eval-results-private" in message and "saved locally" in message
    assert saved.results_path.is_file()


def test_hub_org_lookup_without_network_fails_in_one_sentence(monkeypatch):
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    with pytest.raises(UserError, match="hub_results_org") as caught:
        loggers.HubLogger({"push_samples_to_hub": True}, endpoint="http://127.0.0.1:9")
    assert "\n" not in str(caught.value)
