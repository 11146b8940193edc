"""What a task makes of a model's answers: filtered responses → per-document scores.

The metric plan and the filter pipelines are fixed when the task is built (--predict_only
sets them aside before any request); scoring a document reads them and writes nothing back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from assay.errors import UserError
from assay.runner.scoring import process_results as builtin
from assay.runner.scoring.filters import FilterEnsemble, build_filter_ensemble, default_filter_ensemble
from assay.runner.scoring.metric_plan import MetricPlan
from assay.runner.tasks.config import TaskConfig
from assay.runner.tasks.prompt_builder import PromptBuilder


def build_filters(config: TaskConfig) -> list[FilterEnsemble]:
    if config.filter_list is None:
        return [default_filter_ensemble()]
    ensembles = []
    for entry in config.filter_list:
        if "name" not in entry or "filter" not in entry:
            raise UserError(f"Task {config.task!r}: each filter_list entry needs 'name' and 'filter' keys.")
        ensembles.append(build_filter_ensemble(entry["name"], list(entry["filter"])))
    return ensembles


def metric_plan(config: TaskConfig) -> MetricPlan:
    return MetricPlan.for_metric_list(
        config.metric_list,
        output_type=config.output_type,
        custom_process_results=config.process_results is not None,
        task=config.task,
    )


class TaskScorer:
    """lm-eval's `process_results`: the task's own function, or the built-in one per output type."""

    def __init__(self, config: TaskConfig, prompts: PromptBuilder, plan: MetricPlan) -> None:
        self.config = config
        self.prompts = prompts
        self.plan = plan
        self.filters = build_filters(config)
        self.custom_results = config.process_results
        """The task's own process_results, unless --predict_only set it aside."""

    def predict_only(self) -> None:
        """lm-eval's --predict_only: every metric replaced by `bypass`, the task's process_results unused."""
        self.plan = MetricPlan.bypass()
        self.custom_results = None

    def process_results(self, doc: Mapping[str, Any], results: list[Any]) -> dict[str, Any]:
        if callable(self.custom_results):
            scores: dict[str, Any] = self.custom_results(doc, results)
            return scores
        prompts, names = self.prompts, list(self.plan.fns)
        output_type = self.config.output_type
        if output_type == "loglikelihood":
            return builtin.score_loglikelihood(results[0], names)
        if output_type == "loglikelihood_rolling":
            return builtin.score_rolling(results[0], prompts.doc_to_target(doc), names)
        if output_type == "multiple_choice":
            gold = prompts.doc_to_text(doc) if prompts.multiple_input else prompts.doc_to_target(doc)
            return builtin.score_multiple_choice(
                results,
                choices=prompts.choices(doc),
                gold=gold,
                metrics=names,
                multiple_target=bool(prompts.multiple_target),
            )
        gold = prompts.doc_to_target(doc)
        if prompts.doc_to_choice is not None:
            gold = prompts.choices(doc)[gold]
        return builtin.score_generation(
            results[0],
            gold=gold,
            metric_fns=self.plan.fns,  # type: ignore[arg-type]  # fns are None only under a custom process_results
            multiple_target=bool(prompts.multiple_target) and prompts.doc_to_choice is None,
            cast_gold=prompts.doc_to_choice is None and not prompts.multiple_target and "bypass" not in self.plan.fns,
        )
