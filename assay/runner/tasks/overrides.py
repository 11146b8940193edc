"""A run's settings over its tasks' own configs, kept apart from the configs.

lm-eval writes `--num_fewshot`, `--gen_kwargs` and `--predict_only` into each task's config
(and gives a config without num_fewshot 0), and its results JSON reports the configs so
changed. Assay keeps every `TaskConfig` as its YAML says; one `RunOverrides` decides each
task's `PromptPlan` (`prompt_plan`, for prompts and requests) and its scoring (--predict_only),
and `effective_config` is the config lm-eval would hold, for the results JSON's `configs`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from assay.runner.tasks.config import TaskConfig

BYPASS_METRICS: tuple[Mapping[str, Any], ...] = ({"metric": "bypass"},)
"""--predict_only's metric list: every metric replaced by `bypass`."""


@dataclasses.dataclass(frozen=True)
class RunOverrides:
    """What the run sets over every task's config; the defaults change nothing."""

    num_fewshot: int | None = None
    """--num_fewshot; a task whose config fixes 0 keeps 0."""
    gen_kwargs: Mapping[str, Any] | None = None
    """--gen_kwargs, laid over a generate_until task's generation_kwargs."""
    predict_only: bool = False
    """--predict_only: no metrics, only predictions (`bypass`)."""
    fewshot_seed: int | None = 1234
    """The few-shot sampler's seed (--seed's fourth value)."""

    def num_fewshot_for(self, config: TaskConfig) -> int:
        if self.num_fewshot is not None and config.num_fewshot != 0:
            return self.num_fewshot
        return config.num_fewshot or 0

    def generation_kwargs_for(self, config: TaskConfig) -> dict[str, Any] | None:
        if config.output_type == "generate_until" and self.gen_kwargs:
            return {**(config.generation_kwargs or {}), **self.gen_kwargs}
        return config.generation_kwargs

    def effective_config(self, config: TaskConfig) -> TaskConfig:
        """A copy of `config` with the overrides written in, as lm-eval's config ends up."""
        changes: dict[str, Any] = {
            "num_fewshot": self.num_fewshot_for(config),
            "generation_kwargs": self.generation_kwargs_for(config),
        }
        if self.predict_only:
            changes.update(metric_list=[dict(entry) for entry in BYPASS_METRICS], process_results=None)
        return dataclasses.replace(config, **changes)
