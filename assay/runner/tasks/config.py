"""A task's YAML as a typed record, checked once when the task is built.

Field names and defaults are lm-eval's TaskConfig, so existing task folders load
unchanged; an unknown key is an error that names the key (lm-eval raises a TypeError).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from assay.errors import UserError, suggest

OUTPUT_TYPES = ("loglikelihood", "loglikelihood_rolling", "multiple_choice", "generate_until")


def default_generation_kwargs(fewshot_delimiter: str) -> dict[str, Any]:
    """What lm-eval gives a generate_until task that sets no generation_kwargs."""
    return {"until": [fewshot_delimiter], "do_sample": False, "temperature": 0.0, "max_gen_toks": 256}


@dataclasses.dataclass
class FewshotConfig:
    """How few-shot examples are drawn and rendered; None fields fall back to the task's."""

    sampler: Any = "default"
    split: str | None = None
    process_docs: Callable[..., Any] | None = None
    fewshot_indices: list[int] | None = None
    samples: Any = None
    doc_to_text: Any = None
    doc_to_choice: Any = None
    doc_to_target: Any = None
    gen_prefix: str | None = None
    fewshot_delimiter: str | None = None
    target_delimiter: str | None = None


@dataclasses.dataclass
class TaskConfig:
    task: str
    task_alias: str | None = None
    tag: str | list[str] | None = None
    custom_dataset: Callable[..., Any] | None = None
    dataset_path: str | None = None
    dataset_name: str | None = None
    dataset_kwargs: dict[str, Any] | None = None
    training_split: str | None = None
    validation_split: str | None = None
    test_split: str | None = None
    fewshot_split: str | None = None
    process_docs: Callable[..., Any] | None = None
    doc_to_text: Any = None
    doc_to_target: Any = None
    doc_to_image: Any = None
    doc_to_audio: Any = None
    unsafe_code: bool = False
    doc_to_choice: Any = None
    process_results: Callable[..., Any] | None = None
    use_prompt: str | None = None
    description: str = ""
    target_delimiter: str = " "
    fewshot_delimiter: str = "\n\n"
    fewshot_config: dict[str, Any] | None = None
    num_fewshot: int | None = None
    metric_list: list[dict[str, Any]] | None = None
    output_type: str = "generate_until"
    generation_kwargs: dict[str, Any] | None = None
    repeats: int = 1
    filter_list: list[dict[str, Any]] | None = None
    should_decontaminate: bool = False
    doc_to_decontamination_query: Any = None
    gen_prefix: str | None = None
    metadata: dict[str, Any] | None = None

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> TaskConfig:
        known = {field.name for field in dataclasses.fields(cls)}
        name = raw.get("task", "<unnamed>")
        unknown = [key for key in raw if key not in known]
        if unknown:
            key = unknown[0]
            raise UserError(
                f"Task {name!r} has unknown key {key!r}.{suggest(key, known)} Remove it or fix its spelling."
            )
        if "task" not in raw:
            raise UserError("A task config needs a 'task' key with the task's name.")
        config = cls(**copy.deepcopy(dict(raw)))
        config._check()
        return config

    def _check(self) -> None:
        if self.output_type not in OUTPUT_TYPES:
            raise UserError(
                f"Task {self.task!r} has output_type {self.output_type!r}; use one of {', '.join(OUTPUT_TYPES)}."
            )
        if self.use_prompt is not None:
            raise UserError(f"Task {self.task!r} uses use_prompt (promptsource), which Assay does not support.")
        if self.doc_to_image is not None or self.doc_to_audio is not None:
            raise UserError(
                f"Task {self.task!r} is multimodal (doc_to_image/doc_to_audio), which Assay does not support yet."
            )
        if self.generation_kwargs is not None:
            self.generation_kwargs = dict(self.generation_kwargs)
            if "temperature" in self.generation_kwargs:
                self.generation_kwargs["temperature"] = float(self.generation_kwargs["temperature"])
            self.generation_kwargs.setdefault("until", [self.fewshot_delimiter])
        elif self.output_type == "generate_until":
            self.generation_kwargs = default_generation_kwargs(self.fewshot_delimiter)
        if isinstance(self.metadata, dict) or self.metadata is None:
            self.metadata = dict(self.metadata or {})
        else:
            self.metadata = {"_metadata": self.metadata}

    @property
    def fewshot(self) -> FewshotConfig:
        """The few-shot settings with the task's own fields filled in where unset."""
        raw = dict(self.fewshot_config or {})
        defaults = {
            "split": self.fewshot_split,
            "process_docs": self.process_docs,
            "fewshot_delimiter": self.fewshot_delimiter,
            "target_delimiter": self.target_delimiter,
            "gen_prefix": self.gen_prefix,
            "doc_to_text": self.doc_to_text,
            "doc_to_choice": self.doc_to_choice,
            "doc_to_target": self.doc_to_target,
        }
        merged = {**defaults, **raw}
        merged.setdefault("sampler", "default")
        known = {field.name for field in dataclasses.fields(FewshotConfig)}
        unknown = [key for key in merged if key not in known]
        if unknown:
            raise UserError(
                f"Task {self.task!r}: fewshot_config has unknown key {unknown[0]!r}.{suggest(unknown[0], known)}"
            )
        return FewshotConfig(**merged)

    @property
    def version(self) -> Any:
        return (self.metadata or {}).get("version", None)

    def to_dict(self) -> dict[str, Any]:
        """lm-eval's config dump for the results JSON: None fields dropped, callables as source."""
        dumped: dict[str, Any] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is None:
                continue
            if field.name == "fewshot_config":
                value = dataclasses.asdict(self.fewshot)
            dumped[field.name] = _printable(value)
        return dumped


def _printable(value: Any) -> Any:
    if callable(value):
        import inspect

        try:
            return inspect.getsource(value)
        except (TypeError, OSError):
            return str(value)
    if isinstance(value, dict):
        return {key: _printable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_printable(item) for item in value]
    return value
