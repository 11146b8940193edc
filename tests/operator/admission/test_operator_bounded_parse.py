"""A tenant's task YAML is parsed first in a child process with CPU, memory and time limits:
a child that crashes or runs past a limit is a refusal, and the operator goes on.

Real child processes throughout; the runaway ones are real too (a backtracking regex that
spins, an allocation past the memory limit, a read of address 0)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from assay.errors import UserError
from assay.operator.admission import bounded_parse, task_sources, validation
from assay.spec import parse_spec

DEEP = "task: deep\nmetadata: " + "[" * 30_000 + "]" * 30_000 + "\n"
BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]\n"
    for previous, name in zip("abcdefgh", "bcdefghi", strict=False)
)


def _source(data: dict[str, str], name: str = "suite") -> task_sources.TaskSource:
    return task_sources.TaskSource(config_map=name, resource_version="1", files=data)


def test_a_60_kb_configmap_nested_30000_levels_is_refused_naming_its_key() -> None:
    assert 60_000 < len(DEEP) < 61_000
    started = time.monotonic()
    with pytest.raises(UserError) as refused:
        task_sources.check_parse([_source({"ok.yaml": "task: fine\n", "deep.yaml": DEEP})])
    assert str(refused.value) == (
        "spec.taskSources: ConfigMap 'suite' key 'deep.yaml': It nests collections deeper than 64 levels (line 2); "
        "a task file is shallow: flatten it."
    )
    assert time.monotonic() - started < 30


def test_an_alias_bomb_configmap_is_refused() -> None:
    with pytest.raises(UserError, match=r"^spec.taskSources: ConfigMap 'suite' key 'bomb.yaml': It holds more than"):
        task_sources.check_parse([_source({"bomb.yaml": BOMB})])


def test_the_evaluation_is_refused_before_the_operator_parses_the_text_itself() -> None:
    config_maps = {"suite": {"metadata": {"name": "suite", "resourceVersion": "1"}, "data": {"deep.yaml": DEEP}}}
    spec = parse_spec({"model": "dummy", "tasks": ["deep"], "taskSources": [{"configMap": "suite"}]})
    with pytest.raises(UserError, match="key 'deep.yaml': It nests collections deeper than 64 levels"):
        validation.validate_with_sources(spec, namespace="team-a", get=config_maps.get)


def test_without_task_sources_no_child_is_started(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_child(*_: Any, **__: Any) -> None:
        raise AssertionError("a child process was started")

    monkeypatch.setattr(bounded_parse, "run", no_child)
    task_sources.check_parse([])
    task_sources.check_parse([_source({"utils.py": "x = 1\n"})])  # no YAML key: nothing to parse


def test_a_child_past_its_time_is_a_refusal_naming_the_configmap() -> None:
    with pytest.raises(UserError) as refused:
        task_sources.check_parse([_source({"t.yaml": "task: t\n"})], limits=bounded_parse.Limits(wall_seconds=0.01))
    assert str(refused.value) == (
        "spec.taskSources: parsing the task YAML of ConfigMap 'suite' ran past its 0.01 s in the operator's bounded "
        "parser; task files are small and shallow: shorten or flatten them."
    )


def test_a_child_that_spins_is_killed_at_its_cpu_limit() -> None:
    # Catastrophic backtracking: runs for far longer than the test without the limit.
    limits = bounded_parse.Limits(cpu_seconds=1, wall_seconds=60)
    started = time.monotonic()
    with pytest.raises(bounded_parse.ChildFailed, match="ran past its 1 s of CPU"):
        bounded_parse.run("re:fullmatch", ["(a+)+$", "a" * 60 + "b"], limits=limits)
    assert time.monotonic() - started < 60


def test_a_child_past_its_memory_is_a_failure_not_the_operators() -> None:
    with pytest.raises(bounded_parse.ChildFailed, match="ran past its 256 MiB of memory"):
        bounded_parse.run("builtins:bytearray", [4 * 1024**3])


def test_a_child_that_crashes_is_a_failure() -> None:
    with pytest.raises(bounded_parse.ChildFailed, match=r"crashed \(signal SIGSEGV\)"):
        bounded_parse.run("ctypes:string_at", [0])  # reads address 0


def test_a_childs_other_errors_are_named_by_type_only() -> None:
    # Its text may quote the tenant's input: only the type crosses.
    with pytest.raises(bounded_parse.ChildFailed) as failed:
        bounded_parse.run("math:sqrt", [-1])
    assert failed.value.what == "failed (ValueError)"
    assert bounded_parse.run("math:sqrt", [4]) == 2.0


def test_the_child_is_the_first_the_oom_killer_takes() -> None:
    # Should the operator's container run short of memory, the child goes, not the operator.
    assert bounded_parse.run("linecache:getline", ["/proc/self/oom_score_adj", 1]).strip() == "1000"
