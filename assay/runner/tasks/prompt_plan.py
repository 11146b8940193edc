"""How one task's prompts are built in one run, decided once before its first prompt.

A run's options (--num_fewshot, --gen_kwargs, --predict_only, the few-shot seed, the system
instruction, the chat template) and a task's config decide, per task, how many examples each
prompt holds, how they are drawn, what a generation request asks for and how the prompt is
rendered. `plan_prompts` decides it once, into a frozen `PromptPlan` that the task's
`PromptBuilder` is given (`Task.configure`); the builder reads nothing else of the run, and
the task's config stays as its YAML says (`RunOverrides.effective_config` is what lm-eval's
mutated config would say, for the results).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from assay.run_options import DEFAULT_OTHER_SEED
from assay.runner.tasks.config import TaskConfig
from assay.runner.tasks.overrides import RunOverrides

ChatTemplate = Callable[..., str]


@dataclasses.dataclass(frozen=True)
class PromptSettings:
    """How contexts are rendered in one run, the same for every task."""

    system_instruction: str | None = None
    chat_template: ChatTemplate | None = None
    """The model's `apply_chat_template(messages, add_generation_prompt)`, when applied."""
    fewshot_as_multiturn: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class PromptPlan:
    """One task's prompts in one run. The defaults are a task no run configured: its own
    config's shots and generation kwargs, lm-eval's few-shot seed, plain text."""

    num_fewshot: int = 0
    """Examples per prompt: --num_fewshot, except where the task's config fixes 0."""
    fewshot_seed: int | None = DEFAULT_OTHER_SEED
    """The few-shot sampler's seed (--seed's fourth value); its draws follow document order."""
    generation_kwargs: Mapping[str, Any] | None = None
    """What each generate_until request asks for: the config's, with --gen_kwargs over them."""
    unconditioned: bool = False
    """Also ask for each choice without its context (acc_mutual_info needs it; --predict_only does not)."""
    settings: PromptSettings = PromptSettings()

    @property
    def chat(self) -> bool:
        return self.settings.chat_template is not None


def plan_prompts(
    config: TaskConfig, overrides: RunOverrides, settings: PromptSettings, *, mutual_info: bool
) -> PromptPlan:
    """The plan of a task of `config` under the run's `overrides`; `mutual_info`: a metric of
    the task needs each choice's unconditioned likelihood."""
    return PromptPlan(
        num_fewshot=overrides.num_fewshot_for(config),
        fewshot_seed=overrides.fewshot_seed,
        generation_kwargs=overrides.generation_kwargs_for(config),
        unconditioned=mutual_info and not overrides.predict_only,
        settings=settings,
    )
