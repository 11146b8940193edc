"""A comparison with a run that stopped early (a sequential run: `assay run --stop-early`).

Each task is compared on the documents both runs have, and the notes say which tasks
stopped. A group gated as one (its tasks pooled under one confidence sequence) stops all its
tasks together, after few documents each: their rows, and its subgroups', are often
inconclusive where the group's own row is not. Such an inconclusive row does not make the
comparison inconclusive: the group's row decides, as the gate did. A regression in one of
them still counts (a regression stays a regression).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from assay.compare import verdicts
from assay.run_results import RunResults

if TYPE_CHECKING:
    from assay.compare.comparison import Row


def notes(side: str, run: RunResults) -> list[str]:
    """A run that stopped tasks early (a sequential run) is compared on the documents both runs have."""
    found = run.run_info.get("sequential")
    tasks = found.get("tasks") if isinstance(found, Mapping) else None
    if not isinstance(tasks, Mapping):
        return []
    groups = found.get("groups") if isinstance(found, Mapping) else None
    pooled = {name: entry for name, entry in (groups or {}).items() if isinstance(entry, Mapping)}
    entries = [(f"{name} (its tasks as one)", entry) for name, entry in pooled.items()] + [
        (task, entry)
        for task, entry in tasks.items()
        if isinstance(entry, Mapping) and entry.get("group") not in pooled
    ]
    stopped = [
        f"{task} scored {entry.get('documents')} of {entry.get('total')} documents ({entry.get('stopped')})"
        for task, entry in entries
        if entry.get("documents") != entry.get("total")
    ]
    if not stopped:
        return []
    return [
        f"The {side} stopped early (a sequential run): {'; '.join(stopped)}; "
        "each task is compared on the documents both runs have."
    ]


def pooled(run: RunResults) -> tuple[set[str], set[str]]:
    """The tasks a sequential run stopped early together with their group (gated as one), and those groups."""
    found = run.run_info.get("sequential")
    tasks = found.get("tasks") if isinstance(found, Mapping) else None
    if not isinstance(tasks, Mapping):
        return set(), set()
    stopped = {
        str(task): str(entry["group"])
        for task, entry in tasks.items()
        if isinstance(entry, Mapping) and entry.get("group") and entry.get("documents") != entry.get("total")
    }
    return set(stopped), set(stopped.values())


def too_few_alone(row: Row, pooled: tuple[set[str], set[str]]) -> bool:
    """An inconclusive row of a task stopped with its group, or of a subgroup of such a group (MMLU's
    stem): the pooled group's row decides, not this one (a regression in such a row still counts)."""
    tasks, groups_stopped = pooled
    if row.verdict != verdicts.INCONCLUSIVE or row.task in groups_stopped:
        return False
    return row.task in tasks if row.group is None else set(row.group.subtasks) <= tasks
