"""Checks that run before the model loads: inputs that cannot work fail in seconds, not after it.

A run spends minutes to hours loading a model and building requests before it first
touches some inputs; a typo there used to cost all of that. `check` looks at what can be
known without loading anything: the task names resolve, a model directory named in
model_args exists, and an offline run (HF_HUB_OFFLINE, HF_DATASETS_OFFLINE) has each hub
model and dataset it needs on this machine. `assay run`, the runner pod and its `--check`
all call it, each before building the model; every failure is one `UserError` sentence
naming the input and the fix. A check that cannot be sure stays silent: the loader still
reports what slips through.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from assay import endpoint_urls
from assay.errors import UserError
from assay.runner import models
from assay.runner.models import model_location
from assay.runner.tasks.index import TaskManager
from assay.spec import API_MODELS

# Per backend, the model_args that name a model, tokenizer or adapter, and the argument
# giving their revision; `None` marks a name that must be a local directory.
_LOCATION_ARGS: dict[str, tuple[tuple[str, str | None], ...]] = {
    "hf": (("pretrained", "revision"), ("tokenizer", "revision"), ("peft", "revision"), ("delta", "revision")),
    "vllm": (("pretrained", "revision"), ("tokenizer", "tokenizer_revision"), ("lora_local_path", None)),
}
_LOCATION_ARGS["huggingface"] = _LOCATION_ARGS["hf"]
# The model_args each backend takes as its hub cache folder.
_CACHE_ARG = {"hf": "cache_dir", "huggingface": "cache_dir", "vllm": "download_dir"}
_WHAT = {"pretrained": "model", "tokenizer": "tokenizer", "peft": "PEFT adapter", "delta": "delta weights",
         "lora_local_path": "LoRA adapter"}  # fmt: skip


def check(*, model: Any, model_args: Mapping[str, Any], tasks: Sequence[Any], task_manager: TaskManager) -> None:
    """UserError for the first input of a run that cannot work: task names, the model's name and
    paths, then the data; none of them is loaded."""
    names = [task for task in tasks if isinstance(task, str)]
    configs = task_manager.leaf_configs(names) if names else {}
    if isinstance(model, str):
        models.check_model_name(model)
        check_model_args(model, model_args)
    check_datasets(configs)


def check_model_args(model: str, model_args: Mapping[str, Any]) -> None:
    """A local model path that does not exist, or an offline hub id missing from the cache; an
    endpoint URL with a user name or password."""
    base_url = model_args.get("base_url")
    if model in API_MODELS and isinstance(base_url, str):
        endpoint_urls.refuse_userinfo(base_url)
    offline_by_arg = bool(model_args.get("local_files_only")) and model in ("hf", "huggingface")
    for arg, revision_arg in _LOCATION_ARGS.get(model, ()):
        name = model_args.get(arg)
        if not isinstance(name, str) or not name or model_location.exists_locally(name):
            continue
        what = _WHAT[arg]
        if revision_arg is None or model_location.looks_like_path(name):
            hub = "" if revision_arg is None else ", or give a Hugging Face hub id (org/name)"
            raise UserError(
                f"model_args {arg}={name} names a {what} directory that does not exist on this machine; "
                f"point it at an existing directory{hub}."
            )
        if not (offline_by_arg or model_location.hub_offline()):
            continue
        revision = model_args.get(revision_arg)
        cache = model_location.hub_cache_dir(model_args.get(_CACHE_ARG[model]))
        if model_location.in_hub_cache(name, revision=str(revision) if revision else None, cache=cache):
            continue
        at = f" at revision {revision}" if revision and revision != model_location.DEFAULT_REVISION else ""
        why = "model_args local_files_only=True" if offline_by_arg else f"{model_location.offline_variable()}=1"
        unset = "drop local_files_only" if offline_by_arg else f"unset {model_location.offline_variable()}"
        raise UserError(
            f"model_args {arg}={name} names a Hugging Face hub {what}{at} that is not in the local cache {cache}, "
            f"and {why} forbids downloading it; download it into that cache on a connected machine "
            f"(`hf download {name}`), set HF_HUB_CACHE to a cache that holds it, give a local directory, or {unset}."
        )


def check_datasets(configs: Mapping[str, Mapping[str, Any]]) -> None:
    """In offline mode, every hub dataset must be under ASSAY_DATASETS_DIR or in the datasets cache.

    Local data (packaged builders with `data_files`, local folders, `custom_dataset`) is left
    to the loader; online, the hub can still supply what is missing."""
    hub = {name: config for name, config in configs.items() if _hub_dataset_path(config) is not None}
    if not hub:
        return
    from assay.runner.data import local

    if not local.datasets_offline():
        return
    missing: list[tuple[str, Mapping[str, Any]]] = []
    for task, config in hub.items():
        path, dataset_name, kwargs = config["dataset_path"], config.get("dataset_name"), config.get("dataset_kwargs")
        if local.find_local_files(path, dataset_name) is not None:
            continue
        if not local.in_datasets_cache(path, dataset_name, dict(kwargs) if isinstance(kwargs, Mapping) else None):
            missing.append((task, config))
    if not missing:
        return
    task, config = missing[0]
    path, dataset_name = config["dataset_path"], config.get("dataset_name")
    kwargs = config.get("dataset_kwargs")
    cache = local.datasets_cache_dir(dict(kwargs) if isinstance(kwargs, Mapping) else None)
    variable = "HF_DATASETS_OFFLINE" if os.environ.get("HF_DATASETS_OFFLINE") else model_location.offline_variable()
    config_text = f" (config {dataset_name})" if dataset_name else ""
    others = [name for name, _ in missing[1:]]
    more = f" ({len(others)} more tasks lack their data too: {_listed(others)})" if others else ""
    raise UserError(
        f"Task {task!r} needs the dataset {path}{config_text}, which is neither under {local.ENV_VAR} nor in the "
        f"local datasets cache {cache}, and {variable}=1 forbids downloading it; set {local.ENV_VAR} to a folder "
        f"holding {path}/{dataset_name or local.DEFAULT_CONFIG}/<split>.jsonl (`assay data import` writes one), "
        f"set HF_DATASETS_CACHE to a cache that holds it, or unset {variable}{more}."
    )


def _hub_dataset_path(config: Mapping[str, Any]) -> str | None:
    """The task's dataset_path if the hub would serve it; None for local data and custom loaders."""
    path = config.get("dataset_path")
    if config.get("custom_dataset") is not None or "class" in config or not isinstance(path, str) or not path:
        return None
    from assay.runner.data import local

    return path if local.is_hub_dataset(path) else None


def _listed(names: list[str], shown: int = 5) -> str:
    head = ", ".join(names[:shown])
    return head if len(names) <= shown else f"{head}, ..."
