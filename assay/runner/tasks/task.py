"""A configured task: what loads its documents, what builds its prompts, what scores them.

Everything that depends on a YAML value is resolved when the task is built (dataset
columns, templates, metrics and their aggregations, filters); building requests and
scoring are then plain functions of a document. `Task` puts the three parts together
under lm-eval's names, which the evaluator, the request cache and tests use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from assay.runner.models.instance import Instance
from assay.runner.scoring.filters import FilterEnsemble
from assay.runner.scoring.metric_plan import MetricPlan
from assay.runner.tasks import templates
from assay.runner.tasks.config import TaskConfig
from assay.runner.tasks.documents import Doc, TaskDocuments
from assay.runner.tasks.overrides import RunOverrides
from assay.runner.tasks.prompt_builder import Context, PromptBuilder, PromptSettings
from assay.runner.tasks.scorer import TaskScorer, metric_plan

__all__ = ["PromptSettings", "Task"]


class Task:
    """One evaluation task built from a TaskConfig."""

    def __init__(self, config: TaskConfig, *, tenant: bool = False) -> None:
        """`tenant`: built for a run of a tenant's task sources (see `TaskManager.tenant`): its data
        stays inside the datasets directory or the hub, and its template failures are fixed sentences."""
        self.config = config
        self.name = config.task
        self.documents = TaskDocuments(config, tenant=tenant)
        plan = metric_plan(config)
        self.prompts = PromptBuilder(config, self.documents, unconditioned="acc_mutual_info" in plan.fns, tenant=tenant)
        self.scorer = TaskScorer(config, self.prompts, plan)
        self.overrides: RunOverrides | None = None
        """The run's settings over the config, which stays as loaded (see `use_overrides`)."""

    @property
    def version(self) -> Any:
        return self.config.version

    @property
    def output_type(self) -> str:
        return self.config.output_type

    @property
    def eval_docs(self) -> list[Doc]:
        return self.documents.eval_docs

    @property
    def metrics(self) -> MetricPlan:
        return self.scorer.plan

    @property
    def filters(self) -> list[FilterEnsemble]:
        return self.scorer.filters

    def doc_to_target(self, doc: Mapping[str, Any]) -> Any:
        return self.prompts.doc_to_target(doc)

    def doc_to_text(self, doc: Mapping[str, Any]) -> Any:
        return self.prompts.doc_to_text(doc)

    @property
    def doc_to_choice(self) -> templates.DocFn | None:
        return self.prompts.doc_to_choice

    @property
    def num_fewshot(self) -> int:
        """Few-shot examples per prompt in this run."""
        return (self.overrides or RunOverrides()).num_fewshot_for(self.config)

    def selected_docs(self, *, limit: int | None, samples: Sequence[int] | None) -> list[tuple[int, Doc]]:
        return self.documents.selected(limit=limit, samples=samples)

    def set_fewshot_seed(self, seed: int | None) -> None:
        self.prompts.set_fewshot_seed(seed)

    def fewshot_context(self, doc: Doc, num_fewshot: int, settings: PromptSettings) -> Context:
        return self.prompts.fewshot_context(doc, num_fewshot, settings)

    def build_requests(
        self, *, docs: Sequence[tuple[int, Doc]], num_fewshot: int, settings: PromptSettings
    ) -> list[list[Instance]]:
        return self.prompts.build_requests(docs=docs, num_fewshot=num_fewshot, settings=settings)

    def construct_requests(self, doc_id: int, doc: Doc, context: Context, *, chat: bool = False) -> list[Instance]:
        return self.prompts.construct_requests(doc_id, doc, context, chat=chat)

    def process_results(self, doc: Mapping[str, Any], results: list[Any]) -> dict[str, Any]:
        return self.scorer.process_results(doc, results)

    def use_overrides(self, overrides: RunOverrides) -> None:
        """The run's overrides, before any request is built: its generation kwargs, few-shot
        seed and (--predict_only) `bypass` in place of every metric. The config is not changed."""
        self.overrides = overrides
        self.prompts.generation_kwargs = overrides.generation_kwargs_for(self.config)
        self.prompts.set_fewshot_seed(overrides.fewshot_seed)
        if overrides.predict_only:
            self.scorer.predict_only()
            self.prompts.unconditioned = False

    def dump_config(self) -> dict[str, Any]:
        """The config as lm-eval reports it, which has the run's overrides written in."""
        return (self.overrides.effective_config(self.config) if self.overrides is not None else self.config).to_dict()
