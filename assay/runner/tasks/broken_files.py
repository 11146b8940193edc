"""Task YAML files the index could not load, kept so that later errors can name them.

A task folder may hold YAML that is no task (an include template without a `task` key), and
the index passes over it. A file that does not load at all (a syntax error, a missing
include) is another matter: it was almost certainly meant as a task, and without a record
the user would only hear, later, that its task is unknown. The index keeps a `BrokenFile`
for each; `assay validate` lists them, and an unknown-task error names the file that would
have defined the task.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from pathlib import Path

from assay.errors import Problem, UserError
from assay.runner.tasks.yaml_loader import TaskYamlError

# The name a task or group file gives itself, read from its text (the YAML does not parse).
_NAME_LINE = re.compile(r"^(?:task|group):[ \t]*[\"']?([\w.:+-]+)", re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class BrokenFile:
    path: Path
    error: str
    """The loader's sentence: what is wrong and the fix."""
    line: int | None = None
    """Where in `path` the YAML parser stopped, when it did."""
    names: frozenset[str] = frozenset()
    """What the file may define: its name's stem and the `task:` or `group:` name written in it."""

    def problem(self) -> Problem:
        return Problem(self.error, file=str(self.path), line=self.line)

    def explain(self, name: str) -> str:
        return f"{name!r} is defined in {self.path}, which failed to load: {self.error}"


def broken_file(path: Path, error: UserError) -> BrokenFile:
    """The record of `path`, which failed to load with `error`."""
    in_this_file = isinstance(error, TaskYamlError) and error.path == path.resolve()
    line = error.line if isinstance(error, TaskYamlError) and in_this_file else None
    return BrokenFile(path=path, error=str(error), line=line, names=_names(path))


def defining(broken: Iterable[BrokenFile], name: str) -> BrokenFile | None:
    """The broken file that would have defined `name`, if one would have."""
    return next((file for file in broken if name in file.names), None)


def _names(path: Path) -> frozenset[str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    return frozenset({path.stem, *_NAME_LINE.findall(text)})
