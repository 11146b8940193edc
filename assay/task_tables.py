"""`assay ls`'s output, as lm-eval's: the task library's groups, tags and tasks as Markdown tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def list_tables(task_manager: Any, *, groups: bool = True, tags: bool = True, subtasks: bool = True) -> str:
    """lm-eval's `ls` output: Markdown tables of groups, tags and tasks."""
    from assay.runner.results.table import render_markdown

    out = "\n"
    if groups:
        rows = [[name, _config_location(task_manager.describe(name).path)] for name in task_manager.all_groups]
        out += render_markdown(["Group", "Config Location"], rows) + "\n\n"
    if tags:
        out += render_markdown(["Tag"], [[name] for name in task_manager.all_tags]) + "\n\n"
    if subtasks:
        rows = []
        for name in task_manager.all_subtasks:
            entry = task_manager.describe(name)
            rows.append([name, _config_location(entry.path), entry.output_type or ""])
        out += render_markdown(["Task", "Config Location", "Output Type"], rows) + "\n\n"
    return out


def _config_location(path: Path | None) -> str:
    if path is None:
        return "---"
    from assay.runner.tasks.index_entries import builtin_tasks_dir

    try:
        return "tasks/" + Path(path).resolve().relative_to(builtin_tasks_dir().resolve()).as_posix()
    except ValueError:
        return str(path)


# `assay ls WHAT`: which of the tables it prints.
_LISTED: dict[str, dict[str, bool]] = {
    "tasks": {},
    "groups": {"subtasks": False, "tags": False},
    "subtasks": {"groups": False, "tags": False},
    "tags": {"groups": False, "subtasks": False},
}
# lm-eval before `lm-eval ls` (0.4.9 and older) listed with `--tasks list`, `list_groups`, ...: the
# same tables, so a command from an older README still lists instead of asking for a task "list".
LIST_TASKS_NAMES = {"list": "tasks", "list_groups": "groups", "list_subtasks": "subtasks", "list_tags": "tags"}


def listing(task_manager: Any, what: str) -> str:
    """`assay ls WHAT` (tasks, groups, subtasks or tags)."""
    return list_tables(task_manager, **_LISTED[what])
