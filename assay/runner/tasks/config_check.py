"""A task's composed config checked without building it, every problem at once.

`TaskManager.leaf_configs` composes what a run would build (includes, group overrides) and
reads no dataset. Here that config gets the checks a task meets when it is built, all of
them instead of the first: every key that is not a field of lm-eval's TaskConfig (ours has
exactly its fields, and lm-eval refuses the rest too), the field rules of `TaskConfig`, and
ones a run would only meet at its first document: the Jinja syntax of doc_to_text,
doc_to_target and doc_to_choice, and each `!function` helper. A helper's file must be in the
task folder; where the task's code may run it is imported (its top level runs, as in any
run) and must have the function; where code is refused (a tenant's task files, unless the
admin allows them) nothing is imported, and the reference is reported as refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from assay.errors import Problem, UserError, suggest
from assay.runner.tasks import bounded_yaml, templates
from assay.runner.tasks.config import TaskConfig
from assay.runner.tasks.yaml_loader import FunctionRef, function_refs

TEMPLATE_KEYS = ("doc_to_text", "doc_to_target", "doc_to_choice")
_KNOWN = frozenset(field.name for field in dataclasses.fields(TaskConfig))


def config_problems(name: str, config: Mapping[str, Any]) -> list[Problem]:
    """Every problem of task `name`'s composed config, placed on its YAML file's line where the key is written there."""
    source = config.get("metadata", {}).get("config_source") if isinstance(config.get("metadata"), dict) else None
    path = Path(source) if source and source != "inline" else None
    problems: list[Problem] = []
    for key, message in _messages(name, config):
        problems.append(Problem(message, file=str(path) if path else None, line=_key_line(path, key) if path else None))
    return problems


def _messages(name: str, config: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(the top-level key it concerns, the sentence) for each problem."""
    if "class" not in config:  # a Python task's class takes its own keys
        for key in config:
            if key not in _KNOWN:
                yield (
                    key,
                    f"Task {name!r} has unknown key {key!r}.{suggest(key, _KNOWN)} Remove it or fix its spelling.",
                )
        yield from _field_rules(name, config)
    yield from _template_errors(name, config)
    seen: set[tuple[str, Path]] = set()
    for key, value in config.items():
        for ref in function_refs(value):
            if (ref.qualname, ref.base_dir) not in seen:
                seen.add((ref.qualname, ref.base_dir))
                message = function_problem(name, key, ref)
                if message is not None:
                    yield key, message


def _field_rules(name: str, config: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    try:
        built = TaskConfig.from_dict({key: value for key, value in config.items() if key in _KNOWN})
        _ = built.fewshot
    except UserError as error:
        said = str(error).split(" Did you mean")[0]  # the key the sentence names, not one it suggests
        named = [key for key in config if key != "task" and key in said]
        yield (named[0] if named else ""), str(error)
        return
    yield from _build_rules(name, built)


def _build_rules(name: str, config: TaskConfig) -> Iterator[tuple[str, str]]:
    """What building the task refuses before its first document: the evaluation split, the
    choices a multiple-choice task scores, and its metrics and filters (unknown names with the
    closest known ones)."""
    if config.test_split is None and config.validation_split is None:
        yield "task", f"Task {name!r} has neither test_split nor validation_split; set one of them."
    if config.output_type == "multiple_choice" and config.doc_to_choice is None:
        yield (
            "output_type",
            (
                f"Task {name!r} is multiple_choice but has no doc_to_choice; add doc_to_choice, the list of answer "
                "options (e.g. \"{{choices.text}}\" or ['yes', 'no'])."
            ),
        )
    from assay.runner.tasks import scorer

    for key, build in (("metric_list", scorer.metric_plan), ("filter_list", scorer.build_filters)):
        try:
            build(config)
        except UserError as error:
            yield key, f"Task {name!r}: {key}: {error}" if not str(error).startswith("Task ") else str(error)


def _template_errors(name: str, config: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    fewshot = config.get("fewshot_config")
    places = [(key, key, config.get(key)) for key in TEMPLATE_KEYS]
    if isinstance(fewshot, Mapping):
        places += [("fewshot_config", f"fewshot_config.{key}", fewshot.get(key)) for key in TEMPLATE_KEYS]
    for key, label, value in places:
        error = templates.syntax_error(value) if isinstance(value, str) else None
        if error is not None:
            yield key, f"Task {name!r}: {label} is not a valid Jinja template: {error}; fix the template."


def function_problem(name: str, key: str, ref: FunctionRef) -> str | None:
    """What is wrong with one `!function` reference of task `name`, or None; imports the helper only where code may run."""
    said = f"Task {name!r}: {key} is `!function {ref.qualname}`"
    try:
        path = ref.helper_path()
    except UserError as error:
        return f"{said}, which cannot be used: {error}"
    if not path.is_file():
        return f"{said}, and there is no {path.name} in {path.parent}; put the helper file beside the YAML."
    if not ref.allowed:
        return (
            f"{said}, which exists as a reference to {path.name} but was not imported: task code from {ref.base_dir} "
            "is refused here; use YAML fields and templates only, or ask the cluster admin to set policy.allowTaskCode."
        )
    try:
        ref.resolve()
    except UserError as error:  # the module has no such function
        return f"Task {name!r}: {key}: {error}"
    except Exception as error:
        first = (str(error).strip().splitlines() or [""])[0]
        return f"{said}, and importing {path} failed ({type(error).__name__}: {first}); fix the helper or install what it imports."
    return None


def _key_line(path: Path, key: str) -> int | None:
    """The 1-based line of top-level `key` in a YAML file; None when it is not written there (but in an include)."""
    try:
        text = path.read_text(encoding="utf-8")
        bounded_yaml.check(text, source=f"Task YAML {path}")  # composing recurses once per level
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError, UserError):
        return None
    if not key or not isinstance(node, yaml.MappingNode):
        return None
    return next(
        (k.start_mark.line + 1 for k, _ in node.value if isinstance(k, yaml.ScalarNode) and k.value == key), None
    )
