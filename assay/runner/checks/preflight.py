"""Checks that run before the model loads: inputs that cannot work fail in seconds, not after it.

A run spends minutes to hours loading a model and building requests before it first
touches some inputs; a typo there used to cost all of that. `check` looks at what can be
known without loading anything: the task names resolve, a model directory named in
model_args exists, and each hub model and dataset the run needs is on this machine or can
be downloaded: not in an offline run (HF_HUB_OFFLINE, HF_DATASETS_OFFLINE), nor when the
hub does not answer one quick request (`hub_reach`). `assay run`, the runner pod and its `--check`
all call it, each before building the model (with the task-config check `assay validate` makes); every failure is one `UserError` sentence
naming the input and the fix. A check that cannot be sure stays silent: the loader still
reports what slips through.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from assay import endpoint_urls, errors
from assay.booleans import optional_bool
from assay.errors import UserError
from assay.runner import models
from assay.runner.checks import hub_reach
from assay.runner.models import model_location
from assay.runner.tasks import config_check
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
_WHAT = {
    "pretrained": "model",
    "tokenizer": "tokenizer",
    "peft": "PEFT adapter",
    "delta": "delta weights",
    "lora_local_path": "LoRA adapter",
}


def check(
    *,
    model: Any,
    model_args: Mapping[str, Any],
    tasks: Sequence[Any],
    task_manager: TaskManager,
    num_fewshot: int | None = None,
) -> None:
    """UserError for the first input of a run that cannot work: task names, the model's name and
    paths, then the data (`num_fewshot` is the run's --num_fewshot); none of them is loaded."""
    names = [task for task in tasks if isinstance(task, str)]
    configs = task_manager.leaf_configs(names) if names else {}
    if isinstance(model, str):
        models.check_model_name(model)
        models.check_backend_installed(model)
        check_model_args(model, model_args)
    if task_manager.tenant:
        _confine_tenant_data(configs)
    # The same check `assay validate` makes: a task YAML mistake is one sentence here, not a
    # traceback from the task's first document after the model loaded.
    errors.raise_first(
        [problem for task, config in configs.items() for problem in config_check.config_problems(task, config)]
    )
    check_datasets(configs)
    check_fewshot_splits(configs, num_fewshot)


def _confine_tenant_data(configs: Mapping[str, Mapping[str, Any]]) -> None:
    """A tenant's tasks name data on the hub or in the datasets directory only (`tenant_data`): refused
    here, before the model loads, and again where the dataset is loaded."""
    from assay.runner.data import tenant_data

    for name, config in configs.items():
        if config.get("custom_dataset") is None:
            tenant_data.confine(
                name, config.get("dataset_path"), config.get("dataset_name"), config.get("dataset_kwargs")
            )


def check_model_args(model: str, model_args: Mapping[str, Any]) -> None:
    """A local model path that does not exist, or a hub id missing from the cache while the hub is out of
    reach (offline mode, or no connection); an endpoint URL with a user name or password."""
    base_url = model_args.get("base_url")
    if model in API_MODELS and isinstance(base_url, str):
        endpoint_urls.refuse_userinfo(base_url)
    local_only = model_args.get("local_files_only")
    offline_by_arg = model in ("hf", "huggingface") and bool(
        optional_bool(local_only, name="model_args local_files_only")
    )
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
        revision = model_args.get(revision_arg)
        cache = model_location.hub_cache_dir(model_args.get(_CACHE_ARG[model]))
        if model_location.in_hub_cache(name, revision=str(revision) if revision else None, cache=cache):
            continue
        variable = model_location.offline_variable()
        why_not = (
            _why_no_download("model_args local_files_only=True", "drop local_files_only")
            if offline_by_arg
            else _why_no_download(f"{variable}=1" if model_location.hub_offline() else None, f"unset {variable}")
        )
        if why_not is None:
            continue
        why, undo = why_not
        at = f" at revision {revision}" if revision and revision != model_location.DEFAULT_REVISION else ""
        raise UserError(
            f"model_args {arg}={name} names a Hugging Face hub {what}{at} that is not in the local cache {cache}, "
            f"and {why}; download it into that cache on a connected machine "
            f"(`hf download {name}`), set HF_HUB_CACHE to a cache that holds it, give a local directory, or {undo}."
        )


def _why_no_download(forbidden_by: str | None, undo: str) -> tuple[str, str] | None:
    """Why what is missing cannot be downloaded, and the fix that lifts that; None when the hub is within reach.

    Offline mode forbids it; otherwise one quick connection attempt tells (`hub_reach`), where the
    hub's own clients would retry for half a minute or more before giving up."""
    if forbidden_by is not None:
        return f"{forbidden_by} forbids downloading it", undo
    reason = hub_reach.unreachable()
    if reason is None:
        return None
    return (
        f"the Hugging Face hub ({hub_reach.endpoint()}) cannot be reached from this machine ({reason})",
        "run where the hub can be reached",
    )


def check_datasets(configs: Mapping[str, Mapping[str, Any]]) -> None:
    """Every hub dataset must be under ASSAY_DATASETS_DIR or in the datasets cache, or the hub within reach.

    Local data (packaged builders with `data_files`, local folders, `custom_dataset`) is left
    to the loader; when the hub answers, it can still supply what is missing."""
    from assay.runner.data import local

    # Local files first: they settle it without asking `datasets` (a second to import) anything.
    hub = {
        name: config
        for name, config in configs.items()
        if not _has_local_files(config) and _hub_dataset_path(config) is not None
    }
    if not hub:
        return
    missing: list[tuple[str, Mapping[str, Any]]] = []
    for task, config in hub.items():
        path, dataset_name, kwargs = config["dataset_path"], config.get("dataset_name"), config.get("dataset_kwargs")
        if not local.in_datasets_cache(path, dataset_name, dict(kwargs) if isinstance(kwargs, Mapping) else None):
            missing.append((task, config))
    if not missing:
        return
    variable = "HF_DATASETS_OFFLINE" if os.environ.get("HF_DATASETS_OFFLINE") else model_location.offline_variable()
    why_not = _why_no_download(f"{variable}=1" if local.datasets_offline() else None, f"unset {variable}")
    if why_not is None:
        return
    why, undo = why_not
    task, config = missing[0]
    path, dataset_name = config["dataset_path"], config.get("dataset_name")
    kwargs = config.get("dataset_kwargs")
    cache = local.datasets_cache_dir(dict(kwargs) if isinstance(kwargs, Mapping) else None)
    config_text = f" (config {dataset_name})" if dataset_name else ""
    others = [name for name, _ in missing[1:]]
    more = f" ({len(others)} more tasks lack their data too: {_listed(others)})" if others else ""
    raise UserError(
        f"Task {task!r} needs the dataset {path}{config_text}, which is neither under {local.roots_in_words()} nor in "
        f"the local datasets cache {cache}, and {why}; {local.fixes(path, dataset_name, last=undo)}{more}."
    )


def check_fewshot_splits(configs: Mapping[str, Mapping[str, Any]], num_fewshot: int | None) -> None:
    """A task that draws few-shot examples from a split its ASSAY_DATASETS_DIR copy lacks.

    lm-eval takes them from fewshot_split, else the first split the task names of training,
    validation and test, and fails (a KeyError) where the dataset lacks it; it never falls back
    to another split, so neither does Assay, which would score different prompts. The public
    files `assay data import` converts have no training split for ARC, HellaSwag, PIQA or
    WinoGrande, so a few-shot run of those on imported data would stop at the first document."""
    from assay.runner.data import local

    for task, config in configs.items():
        fixed = config.get("num_fewshot")
        shots = num_fewshot if num_fewshot is not None and fixed != 0 else fixed or 0
        path = config.get("dataset_path")
        if not shots or not _has_local_files(config) or not isinstance(path, str):
            continue
        given = config.get("fewshot_config")
        fewshot: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
        if fewshot.get("samples") is not None and fewshot.get("split") is None:
            continue
        named = (fewshot.get("split"), config.get("fewshot_split"))
        order = (
            named if any(named) else (config.get(key) for key in ("training_split", "validation_split", "test_split"))
        )
        split = next((name for name in order if name), None)
        files = local.find_local_files(path, config.get("dataset_name")) or {}
        if split is None or split in files:
            continue
        folder = next(iter(files.values())).parent
        raise UserError(
            f"Task {task!r} takes its {shots} few-shot examples from the split {split!r}, which its data under "
            f"{local.ENV_VAR} ({folder}) lacks (it has {', '.join(sorted(files))}; the public files "
            f"`assay data import` converts have no such split); run with --num_fewshot 0, add {folder / split}.jsonl, "
            f"or use the hub dataset (the Hugging Face hub within reach, without {local.ENV_VAR})."
        )


def _has_local_files(config: Mapping[str, Any]) -> bool:
    """Whether ASSAY_DATASETS_DIR holds the dataset the task's loader would take from the hub."""
    path = config.get("dataset_path")
    if config.get("custom_dataset") is not None or "class" in config or not isinstance(path, str) or not path:
        return False
    from assay.runner.data import local

    return local.find_local_files(path, config.get("dataset_name")) is not None


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
