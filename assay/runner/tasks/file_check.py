"""One task YAML checked on its own, loudly.

The index skips a file it cannot read (a task folder may hold unrelated YAML), so a broken
task only shows when it is asked for. A file handed in on purpose (a ConfigMap key of an
Evaluation's spec.taskSources) is checked here instead, with the checks a task gets when it
is built: YAML syntax, includes, a `task` or `group` key, and every task field known.
"""

from __future__ import annotations

from pathlib import Path

from assay.errors import UserError
from assay.runner.tasks.config import TaskConfig
from assay.runner.tasks.index_entries import kind_of
from assay.runner.tasks.yaml_loader import function_refs, load_yaml

# Keys the index reads and drops before a task is built (as TaskManager._build_task does).
_INDEX_KEYS = ("tag", "group", "task_list")


def check_task_file(path: str | Path, *, root: str | Path | None = None, allow_code: bool = True) -> tuple[str, ...]:
    """The names (task or group, then its tags) a task YAML defines; UserError if it is broken.

    `root`: the folder its includes and helpers must stay in (default: its own folder);
    `allow_code` False: a `!function` anywhere in it (or its includes) is refused.
    """
    config = load_yaml(path, resolve_functions=False, root=root)
    refs = function_refs(config)
    if refs and not allow_code:
        raise UserError(
            f"Task YAML {path} uses `!function {refs[0].qualname}`, and task code from task sources is not "
            "allowed in this cluster: use YAML fields and templates only, or ask the cluster admin to set "
            "policy.allowTaskCode."
        )
    for ref in refs:
        ref.module_path()  # a helper outside the task folder is refused now, not when the task is built
    try:
        kind = kind_of(config)
    except ValueError:
        raise UserError(f"Task YAML {path} has neither a 'task' nor a 'group' key; add the task's name.") from None
    if kind == "python_task":
        raise UserError(f"Task YAML {path} names a Python class ('class'), which needs custom code; use YAML fields.")
    if kind == "group":
        return (str(config["group"]),)
    TaskConfig.from_dict({k: v for k, v in config.items() if k not in _INDEX_KEYS})
    tags = config.get("tag")
    return (str(config["task"]), *([tags] if isinstance(tags, str) else list(tags or [])))
