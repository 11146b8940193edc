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
from assay.runner.tasks.index import _kind_of
from assay.runner.tasks.yaml_loader import load_yaml

# Keys the index reads and drops before a task is built (as TaskManager._build_task does).
_INDEX_KEYS = ("tag", "group", "task_list")


def check_task_file(path: str | Path) -> tuple[str, ...]:
    """The names (task or group, then its tags) a task YAML defines; UserError if it is broken."""
    config = load_yaml(path, resolve_functions=False)
    try:
        kind = _kind_of(config)
    except ValueError:
        raise UserError(f"Task YAML {path} has neither a 'task' nor a 'group' key; add the task's name.") from None
    if kind == "python_task":
        raise UserError(f"Task YAML {path} names a Python class ('class'), which needs custom code; use YAML fields.")
    if kind == "group":
        return (str(config["group"]),)
    TaskConfig.from_dict({k: v for k, v in config.items() if k not in _INDEX_KEYS})
    tags = config.get("tag")
    return (str(config["task"]), *([tags] if isinstance(tags, str) else list(tags or [])))
