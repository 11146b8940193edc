"""What a run's inputs can be checked for without loading anything or asking any server, every problem at once.

`assay validate` and the runner's `--check` (a runner pod's init container) share this:
the model's name and its model_args (parsed as its backend parses them), the task names (an
unknown one with the closest known names, or with the error of the broken file that would
have defined it), and the config of every task a run would build (`tasks.config_check`).
What depends on the machine that runs it (model directories, hub and dataset caches in
offline mode, the output volume) stays in `preflight` and `job`: a manifest checked on a
laptop is run in a pod.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from assay import spec as spec_module
from assay.errors import Problem, UserError
from assay.runner import models
from assay.runner.models import args_check
from assay.runner.tasks import config_check
from assay.runner.tasks.index import TaskManager


def task_index(include_path: str | None, *, metadata: Mapping[str, Any] | None = None) -> TaskManager:
    """The task index a run uses. With ASSAY_TASK_CODE set (a runner pod), the include path holds a
    tenant's task sources: no name of the library, and `!function` only when it says `allowed`."""
    task_code = os.environ.get(spec_module.ENV_TASK_CODE)
    if include_path and task_code is not None:
        return TaskManager(
            include_path, metadata=dict(metadata or {}), include_code=task_code == "allowed", include_may_shadow=False
        )
    return TaskManager(include_path, metadata=dict(metadata or {}))


def spec_task_index(spec: spec_module.Evaluation, include_path: str | None) -> TaskManager:
    # simple_evaluate's own default, plus include_path: task YAMLs see model_args as metadata.
    return task_index(include_path, metadata={**dict(spec.model_args), **dict(spec.metadata or {})})


def spec_problems(spec: spec_module.Evaluation, task_manager: TaskManager) -> list[Problem]:
    """Every problem of a parsed spec's model, model_args and tasks, as the runner sees them."""
    return [*model_problems(spec.model, spec.run_model_args()), *task_problems(task_manager, spec.tasks)]


def model_problems(model: str, model_args: Mapping[str, Any]) -> list[Problem]:
    try:
        models.check_model_name(model)
    except UserError as error:
        return [Problem(str(error), field="model")]
    try:
        args_check.check_model_args(model, model_args)
    except UserError as error:
        return [Problem(str(error), field="modelArgs")]
    return []


def task_problems(task_manager: TaskManager, names: Sequence[str]) -> list[Problem]:
    """Each name that does not resolve, then every problem of each task the names would build (each task once)."""
    problems: list[Problem] = []
    checked: set[str] = set()
    for name in names:
        try:
            configs = task_manager.leaf_configs([name])
        except UserError as error:
            problems.append(Problem(str(error), field="tasks"))
            continue
        for task, config in configs.items():
            if task not in checked:
                checked.add(task)
                problems.extend(config_check.config_problems(task, config))
                if task_manager.tenant:
                    problems.extend(tenant_data_problems(task, config))
    return problems


def tenant_data_problems(task: str, config: Mapping[str, Any]) -> list[Problem]:
    """Where a tenant's task names data outside the hub and the datasets directory (`tenant_data`)."""
    from assay.runner.data import tenant_data

    if config.get("custom_dataset") is not None:
        return []
    try:
        tenant_data.confine(task, config.get("dataset_path"), config.get("dataset_name"), config.get("dataset_kwargs"))
    except UserError as error:
        return [Problem(str(error), field="tasks")]
    return []
