"""One run's results as typed records: made by aggregation, read by every consumer.

lm-eval's results dict spreads each task over parallel sections (`results`, `configs`,
`versions`, `n-shot`, `higher_is_better`, `n-samples`, `samples`); here a task or group is
one `TaskResult`. The dict is rendered from the record in one place (`to_lmeval_dict`: the
results JSON, and what `simple_evaluate` returns) and read into it in one place
(`from_lmeval_dict`: a results JSON on disk, a dict handed to a logger or to the status
sink). The table, the loggers, the status and `assay compare` read the records.

Rendering keeps lm-eval 0.4.13's shape and key order, so a dict it (or Assay) wrote reads
in and renders back equal. An older or hand-made dict reads leniently: a section it lacks is
empty, a row member it lacks is rendered as 0.4.13 lists it, members no reader uses
(`samples` or " " inside a row) are dropped.

Sits below the runner and `assay.compare`, which both read it; above `assay.scores`.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterator, Mapping
from typing import Any, Final

from assay import scores


class _Absent(enum.Enum):
    ABSENT = "absent"


ABSENT: Final = _Absent.ABSENT
"""A task's version or n-shot that the dict does not list (lm-eval may list None)."""

_SECTIONS = (
    "results",
    "groups",
    "group_subtasks",
    "configs",
    "versions",
    "n-shot",
    "higher_is_better",
    "n-samples",
    "samples",
)


@dataclasses.dataclass(frozen=True)
class TaskResult:
    """One task or group across lm-eval's sections; None (ABSENT) where a section leaves it out."""

    name: str
    scores: scores.TaskScores | None = None
    """Its row of aggregated values (for a group, the same row lm-eval lists under both
    `results` and `groups`); None when neither section has one."""
    in_results: bool = True
    """Whether `results` lists its row (a dict may list a group under `groups` only)."""
    config: Mapping[str, Any] | None = None
    """`configs`: the task's config as lm-eval dumps it (with the run's overrides)."""
    version: Any = ABSENT
    n_shot: Any = ABSENT
    higher_is_better: Mapping[str, bool | None] | None = None
    """Per metric; None for a metric the group's tasks disagree on."""
    n_samples: Mapping[str, Any] | None = None
    """`{"original": documents in the split, "effective": documents scored}`."""
    samples: tuple[Mapping[str, Any], ...] | None = None
    """Per document and filter, the samples line (or, without logSamples, its compact scores line)."""


@dataclasses.dataclass(frozen=True)
class RunResults:
    """A run's results: every task and group, the group tree, and the run-level members."""

    tasks: Mapping[str, TaskResult]
    """Leaf tasks first, then groups bottom-up: the order of lm-eval's `results`."""
    groups: tuple[str, ...] = ()
    """The groups that aggregate (lm-eval's `groups`), in the order lm-eval lists them."""
    group_subtasks: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    """Every group's children (sub-groups among them), aggregating or not."""
    config: Mapping[str, Any] | None = None
    """The run's `config` (model, model_args, batch sizes, seeds, ...); None before the run adds it."""
    run_info: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """The top-level members after `config`, in order: provenance (git hash, date, versions),
    tokenizer facts, and once saved the task hashes and run info."""

    # --- reading ------------------------------------------------------------------------

    def results_names(self) -> list[str]:
        """The names lm-eval lists under `results`, in its order."""
        return [name for name, task in self.tasks.items() if task.in_results and task.scores is not None]

    def rows(self, column: str = "results") -> Iterator[tuple[TaskResult, scores.TaskScores]]:
        """Each task (or, for "groups", each aggregating group) with its row."""
        for name in self.groups if column == "groups" else self.results_names():
            task = self.tasks[name]
            if task.scores is not None:
                yield task, task.scores

    def samples_by_task(self) -> dict[str, list[Mapping[str, Any]]]:
        """lm-eval's `samples`: per task, in task order; empty when the run kept none."""
        return {name: list(task.samples) for name, task in self.tasks.items() if task.samples is not None}

    def without_samples(self) -> RunResults:
        tasks = {name: dataclasses.replace(task, samples=None) for name, task in self.tasks.items()}
        return dataclasses.replace(self, tasks=tasks)

    def config_of(self, name: str) -> Mapping[str, Any]:
        config = self.tasks[name].config if name in self.tasks else None
        return config if config is not None else {}

    def higher_is_better_of(self, name: str) -> Mapping[str, bool | None]:
        higher = self.tasks[name].higher_is_better if name in self.tasks else None
        return higher if higher is not None else {}

    def sentinels(self) -> Mapping[str, Any] | None:
        """The results' `sentinels` block (the run's plausibility checks); None where the run made none."""
        found = self.run_info.get("sentinels")
        return found if isinstance(found, Mapping) else None

    def untrusted(self) -> list[tuple[str, str]]:
        """(task, reason) for every failed sentinel check; empty where all passed or none ran."""
        found = self.sentinels()
        if found is None:
            return []
        failed: list[tuple[str, str]] = []
        parts = [(name, _mapping(entry)) for name, entry in _mapping(found.get("tasks")).items()]
        parts += [("(served model)", _mapping(found.get("served")))] if "served" in found else []
        for name, entry in parts:
            for check, finding in _mapping(entry.get("checks")).items():
                finding = _mapping(finding)
                if finding.get("passed") is False:
                    failed.append((str(name), str(finding.get("reason") or f"the {check} check failed")))
        if not failed and found.get("trusted") is False:
            failed.append(("(run)", "its sentinels failed"))
        return failed

    # --- lm-eval's dict -----------------------------------------------------------------

    def row(self, name: str) -> dict[str, Any]:
        """lm-eval 0.4.13's row for one task or group, in its key order."""
        result = self.tasks[name].scores
        assert result is not None, name
        if name in self.group_subtasks:
            return _group_row(result)
        return _task_row(result)

    def to_lmeval_dict(self, *, samples: bool = True) -> dict[str, Any]:
        """lm-eval's results dict, key for key (`samples` left out when told)."""
        tasks = self.tasks.values()
        group_rows = {name: self.row(name) for name in self.groups}
        rendered: dict[str, Any] = {
            "results": {name: self.row(name) for name in self.results_names()},
            **({"groups": group_rows} if group_rows else {}),
            "group_subtasks": {name: list(children) for name, children in self.group_subtasks.items()},
            "configs": _sorted({task.name: task.config for task in tasks if task.config is not None}),
            "versions": _sorted({task.name: task.version for task in tasks if task.version is not ABSENT}),
            "n-shot": _sorted({task.name: task.n_shot for task in tasks if task.n_shot is not ABSENT}),
            "higher_is_better": _sorted(
                {task.name: task.higher_is_better for task in tasks if task.higher_is_better is not None}
            ),
            "n-samples": {task.name: task.n_samples for task in tasks if task.n_samples is not None},
        }
        if samples and any(task.samples is not None for task in tasks):
            rendered["samples"] = self.samples_by_task()
        if self.config is not None:
            rendered["config"] = self.config
        rendered.update(self.run_info)
        return rendered

    @classmethod
    def from_lmeval_dict(cls, results: Mapping[str, Any]) -> RunResults:
        """The record of lm-eval's results dict (a results JSON as read, or a run's dict)."""
        sections = {key: _mapping(results.get(key)) for key in _SECTIONS}
        names = dict.fromkeys(str(name) for key in _SECTIONS if key != "group_subtasks" for name in sections[key])
        tasks = {name: _task_result(name, sections) for name in names}
        subtasks = {
            str(name): tuple(children) if isinstance(children, (list, tuple)) else ()
            for name, children in sections["group_subtasks"].items()
        }
        config = results.get("config")
        return cls(
            tasks=tasks,
            groups=tuple(str(name) for name in sections["groups"]),
            group_subtasks=subtasks,
            config=config if isinstance(config, Mapping) else None,
            run_info={key: value for key, value in results.items() if key not in _SECTIONS and key != "config"},
        )


def _task_result(name: str, sections: Mapping[str, Mapping[str, Any]]) -> TaskResult:
    rows, group_rows = sections["results"], sections["groups"]
    row = rows.get(name, group_rows.get(name))
    samples = sections["samples"].get(name)
    return TaskResult(
        name=name,
        scores=_read_row(name, row) if row is not None else None,
        in_results=name in rows,
        config=_optional_mapping(sections["configs"].get(name)),
        version=sections["versions"].get(name, ABSENT),
        n_shot=sections["n-shot"].get(name, ABSENT),
        higher_is_better=_optional_mapping(sections["higher_is_better"].get(name)),
        n_samples=_optional_mapping(sections["n-samples"].get(name)),
        samples=tuple(samples) if isinstance(samples, (list, tuple)) else None,
    )


def _read_row(name: str, row: Any) -> scores.TaskScores:
    row = _mapping(row)
    counts = _mapping(row.get("sample_count"))
    values = tuple(
        dataclasses.replace(value, sample_count=counts.get(value.key)) if value.key in counts else value
        for value in scores.read_row(row, comma_keys_only=True)
    )
    alias = row.get("alias", name)
    sample_len = row.get("sample_len")
    return scores.TaskScores(
        name,
        alias if isinstance(alias, str) else str(alias),
        values,
        sample_len if isinstance(sample_len, int) and not isinstance(sample_len, bool) else None,
    )


def _task_row(result: scores.TaskScores) -> dict[str, Any]:
    row: dict[str, Any] = {"name": result.name, "alias": result.alias}
    if result.sample_len is not None:
        row["sample_len"] = result.sample_len
    row.update(scores.row_entries(result.values))
    return row


def _group_row(result: scores.TaskScores) -> dict[str, Any]:
    row: dict[str, Any] = {"alias": result.alias, "name": result.name}
    if result.sample_len is not None:  # a group without aggregate_metric_list only nests its children
        row["sample_len"] = result.sample_len
    row.update(scores.row_entries(result.values))
    counts = {value.key: value.sample_count for value in result.values if value.sample_count is not None}
    if counts:
        row["sample_count"] = counts
    return row


def _sorted(section: Mapping[str, Any]) -> dict[str, Any]:
    return dict(sorted(section.items(), key=lambda item: item[0]))


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _optional_mapping(value: Any) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None
