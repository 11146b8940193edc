"""What the task index holds for one name: its kind, where it was found, and whether its code may run.

Indexing reads YAML only; `index.TaskManager` builds tasks and groups from these entries."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal

Kind = Literal["task", "group", "tag", "python_task"]
_SKIP_DIRS = {"__pycache__", ".ipynb_checkpoints"}


def skipped(part: str) -> bool:
    # A Kubernetes ConfigMap volume holds each key thrice: KEY → ..data/KEY → ..<timestamp>/KEY.
    return part in _SKIP_DIRS or part.startswith("..")


def builtin_tasks_dir() -> Path:
    """The shipped library: `tasks/` at the repository root, installed as `assay/tasks`."""
    package = Path(__file__).resolve().parents[2]  # assay/ (this file is assay/runner/tasks/index.py)
    checkout, installed = package.parent / "tasks", package / "tasks"
    for candidate in (checkout, installed):
        if candidate.is_dir():
            return candidate
    return checkout


@dataclasses.dataclass
class IndexEntry:
    name: str
    kind: Kind
    path: Path | None
    config: dict[str, Any] | None = None
    members: set[str] = dataclasses.field(default_factory=set)
    """For a tag: the tasks that carry it."""
    root: Path | None = None
    """The folder `path` was found under: its includes and helpers are read from there only."""
    code_allowed: bool = True
    """Whether its `!function` helpers may run (not for a tenant's task files unless the admin allows)."""

    @property
    def output_type(self) -> str | None:
        if self.kind in ("task", "python_task") and self.config is not None:
            output_type: str = self.config.get("output_type", "generate_until")
            return output_type
        return None


def kind_of(config: dict[str, Any]) -> Kind:
    if "class" in config:
        return "python_task"
    if "group" in config:
        return "group"
    if "task" in config:
        return "task"
    raise ValueError("neither task nor group")
