"""What a sequential run says about its stops, read from its results' `sequential` member.

The results JSON keeps, per task, the documents scored of the total, why it stopped and the
gate's interval at the stop (`assay.runner.sequential.run`), and the same per pooled group
(`groups`: a group gated as one, whose tasks' entries name it); the printed table says the
same in a footnote, status in `status.comparison.sequential` and a saved-work figure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from assay.run_results import RunResults
from assay.spec import status as schema

STOP_MARK = "⏹"
"""Before the footnote on a sequential run's stops."""
REASONS = {
    "non_inferior": "non-inferior",
    "regressed": "regressed",
    "precise": "precise enough",
    "exhausted": "every document scored",
}


def block(run: RunResults) -> Mapping[str, Any] | None:
    """The results' `sequential` member; None for an ordinary run."""
    found = run.run_info.get("sequential")
    return found if isinstance(found, Mapping) and isinstance(found.get("tasks"), Mapping) else None


def footnote(run: RunResults, shown: set[str]) -> list[str]:
    """The table's footnote lines on the stops of the tasks `shown`; empty for an ordinary run."""
    found = block(run)
    if found is None:
        return []
    lines = [f"{STOP_MARK} sequential run (document order seed {found.get('seed')}):"]
    pooled = groups(found)
    for group, entry in pooled.items():
        if group in shown or any(task in shown for task in entry.get("tasks") or ()):
            lines.append(f"{STOP_MARK} {group} (its {len(entry.get('tasks') or ())} tasks as one): {sentence(entry)}")
    for task, entry in found["tasks"].items():  # a pooled group's tasks: its line says it (the JSON has each)
        if task in shown and isinstance(entry, Mapping) and entry.get("group") not in pooled:
            lines.append(f"{STOP_MARK} {task}: {sentence(entry)}")
    return lines if len(lines) > 1 else []


def groups(found: Mapping[str, Any]) -> Mapping[str, Mapping[str, Any]]:
    """The pooled groups' entries of a `sequential` block (none in a run written before groups were)."""
    entries = found.get("groups")
    if not isinstance(entries, Mapping):
        return {}
    return {str(name): entry for name, entry in entries.items() if isinstance(entry, Mapping)}


def sentence(entry: Mapping[str, Any]) -> str:
    """`128 of 400 documents, stopped non-inferior; acc,none −0.0000 [−0.0325, +1.0000].`"""
    reason = str(entry.get("stopped"))
    text = f"{entry.get('documents')} of {entry.get('total')} documents, "
    text += "every document scored" if reason == "exhausted" else f"stopped {REASONS.get(reason, reason)}"
    intervals = [
        f"{look.get('metric')} {_signed(look.get('mean_difference'))} "
        f"[{_signed(look.get('lower'))}, {_signed(look.get('upper'))}]"
        for look in entry.get("interval") or ()
        if isinstance(look, Mapping)
    ]
    if intervals:
        text += "; " + ", ".join(intervals)
    note = entry.get("note")
    return text + (f" ({note})" if note else "") + "."


def _signed(value: Any) -> str:
    return f"{value:+.4f}" if isinstance(value, (int, float)) else "n/a"


def saved_work(run: RunResults) -> schema.SavedWork | None:
    """`status.savedWork`: documents not scored and the model-seconds that saved, over all tasks."""
    found = block(run)
    if found is None:
        return None
    entries = [entry for entry in found["tasks"].values() if isinstance(entry, Mapping)]
    return {
        "documents": sum(int(entry.get("saved_documents") or 0) for entry in entries),
        "ofDocuments": sum(int(entry.get("total") or 0) for entry in entries),
        "modelSeconds": round(sum(float(entry.get("saved_seconds") or 0.0) for entry in entries), 1),
    }


MAX_TASKS = 50
"""Tasks listed in `status.comparison.sequential` (status is bounded; the results JSON has them all)."""


def status_block(run: RunResults) -> schema.SequentialStops | None:
    """`status.comparison.sequential`: per task the documents scored of the total, why it stopped, the
    interval at the stop (of its first deciding metric); a pooled group is one row (`subtasks`: how
    many tasks stopped with it), its tasks not listed apart. None for an ordinary run."""
    found = block(run)
    if found is None:
        return None
    pooled = groups(found)
    entries = [(name, entry, True) for name, entry in pooled.items()] + [
        (name, entry, False)
        for name, entry in found["tasks"].items()
        if isinstance(entry, Mapping) and entry.get("group") not in pooled
    ]
    tasks: list[schema.SequentialStop] = []
    for task, entry, is_group in entries[:MAX_TASKS]:
        row: schema.SequentialStop = {
            "task": str(task),
            "documents": int(entry.get("documents") or 0),
            "total": int(entry.get("total") or 0),
            "stopped": str(entry.get("stopped")),
        }
        if is_group:
            row["subtasks"] = len(entry.get("tasks") or ())
        looks = [look for look in entry.get("interval") or () if isinstance(look, Mapping)]
        if looks:
            first = looks[0]
            row["metric"], row["lower"], row["upper"] = str(first.get("metric")), first.get("lower"), first.get("upper")
        tasks.append(row)
    seed = found.get("seed")
    return {
        "seed": seed if isinstance(seed, int) else 0,
        "tasks": tasks,
        "tasksOmitted": max(0, len(entries) - MAX_TASKS),
    }
