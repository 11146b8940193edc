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
from assay.runner.tasks.prompt_builder import Context, PromptBuilder
from assay.runner.tasks.prompt_plan import PromptPlan, PromptSettings, plan_prompts
from assay.runner.tasks.scorer import TaskScorer, metric_plan

__all__ = ["PromptPlan", "PromptSettings", "Task"]


class Task:
    """One evaluation task built from a TaskConfig."""

    def __init__(self, config: TaskConfig, *, tenant: bool = False) -> None:
        """`tenant`: built for a run of a tenant's task sources (see `TaskManager.tenant`): its data
        stays inside the datasets directory or the hub, and its template failures are fixed sentences."""
        self.config = config
        self.name = config.task
        self.documents = TaskDocuments(config, tenant=tenant)
        metrics = metric_plan(config)
        self._mutual_info = "acc_mutual_info" in metrics.fns
        self.prompts = PromptBuilder(config, self.documents, plan=self._plan(RunOverrides()), tenant=tenant)
        self.scorer = TaskScorer(config, self.prompts, metrics)
        self.overrides: RunOverrides | None = None
        """The run's settings over the config, which stays as loaded (see `configure`)."""

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
    def prompt_plan(self) -> PromptPlan:
        """How this run builds the task's prompts (`configure`)."""
        return self.prompts.plan

    @property
    def num_fewshot(self) -> int:
        """Few-shot examples per prompt in this run."""
        return self.prompt_plan.num_fewshot

    def selected_docs(self, *, limit: int | None, samples: Sequence[int] | None) -> list[tuple[int, Doc]]:
        return self.documents.selected(limit=limit, samples=samples)

    def fewshot_context(self, doc: Doc, plan: PromptPlan | None = None) -> Context:
        return self.prompts.fewshot_context(doc, plan)

    def build_requests(self, docs: Sequence[tuple[int, Doc]]) -> list[list[Instance]]:
        """The documents' requests, as the run's plan wants them, in document order."""
        return self.prompts.build_requests(docs)

    def construct_requests(self, doc_id: int, doc: Doc, context: Context) -> list[Instance]:
        return self.prompts.construct_requests(doc_id, doc, context)

    def process_results(self, doc: Mapping[str, Any], results: list[Any]) -> dict[str, Any]:
        return self.scorer.process_results(doc, results)

    def configure(self, overrides: RunOverrides, settings: PromptSettings) -> None:
        """The run's overrides and prompt settings, before any request is built: one plan for the
        prompts (shots, few-shot seed, generation kwargs, rendering), given to the prompt builder,
        and (--predict_only) `bypass` in place of every metric. The config is not changed."""
        self.overrides = overrides
        self.prompts.follow(self._plan(overrides, settings))
        if overrides.predict_only:
            self.scorer.predict_only()

    def _plan(self, overrides: RunOverrides, settings: PromptSettings | None = None) -> PromptPlan:
        return plan_prompts(self.config, overrides, settings or PromptSettings(), mutual_info=self._mutual_info)

    def dump_config(self) -> dict[str, Any]:
        """The config as lm-eval reports it, which has the run's overrides written in."""
        return (self.overrides.effective_config(self.config) if self.overrides is not None else self.config).to_dict()
