"""A configured task: its documents, the requests it asks of a model, and its scores.

Everything that depends on a YAML value is resolved when the task is built (dataset
columns, templates, metrics, filters); building requests and scoring are then plain
functions of a document.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from assay.errors import UserError
from assay.runner.scoring import process_results as scoring
from assay.runner.tasks import templates
from assay.runner.tasks.fewshot import DefaultSampler, make_sampler
from assay.runner.models.instance import GenerationRequest, Instance, LoglikelihoodRequest, RollingRequest
from assay.runner.tasks.prompts import Message, join_with_space, qa_turn, render_messages
from assay.runner.tasks.config import TaskConfig

ChatTemplate = Callable[..., str]


@dataclasses.dataclass(frozen=True)
class PromptSettings:
    """How contexts are rendered for one run."""

    system_instruction: str | None = None
    chat_template: ChatTemplate | None = None
    """The model's `apply_chat_template(messages, add_generation_prompt)`, when applied."""
    fewshot_as_multiturn: bool = False


def _load_dataset(config: TaskConfig) -> Any:
    if config.custom_dataset is not None:
        return config.custom_dataset(**(config.metadata or {}), **(config.dataset_kwargs or {}))
    kwargs = dict(config.dataset_kwargs or {})
    # datasets >= 4 dropped dataset scripts; lm-eval removes the flag the same way.
    trust = bool(kwargs.pop("trust_remote_code", False))
    if config.dataset_path is None:
        raise UserError(f"Task {config.task!r} sets no dataset_path; add one (or a custom_dataset function).")
    from assay.runner.data.local import load_task_dataset

    return load_task_dataset(config.dataset_path, config.dataset_name, kwargs, trust_remote_code=trust)


def _column_names(docs: Any) -> list[str]:
    names = getattr(docs, "column_names", None)
    if names is not None:
        return list(names)
    return list(docs[0].keys()) if len(docs) else []


class Task:
    """One evaluation task built from a TaskConfig."""

    def __init__(self, config: TaskConfig) -> None:
        self.config = config
        self.name = config.task
        self.dataset = _load_dataset(config)
        self.eval_split = config.test_split or config.validation_split
        if self.eval_split is None:
            raise UserError(f"Task {self.name!r} has neither test_split nor validation_split; set one of them.")
        self.eval_docs: list[dict[str, Any]] = self._split_docs(self.eval_split)
        if not self.eval_docs:
            raise UserError(f"Task {self.name!r}: split {self.eval_split!r} has no documents.")
        self.features = _column_names(self._raw_split(self.eval_split))
        if self.eval_docs and set(self.eval_docs[0]) - set(self.features):
            self.features = list(self.eval_docs[0].keys())
        has_choices = config.doc_to_choice is not None
        self.doc_to_text = templates.compile_text(config.doc_to_text, self.features, has_choices=has_choices)
        self.doc_to_target = templates.compile_target(config.doc_to_target, self.features, has_choices=has_choices)
        self.doc_to_choice = templates.compile_choice(config.doc_to_choice, self.features) if has_choices else None
        self.description = templates.compile_field(config.description, self.features)
        self.gen_prefix = templates.compile_field(config.gen_prefix, self.features)
        self.fewshot_cfg = config.fewshot
        self.metrics = _MetricPlan.for_task(config)
        self.filters = _build_filters(config)
        self._sampler: DefaultSampler | None = None
        self.fewshot_seed: int | None = 1234
        first = self.eval_docs[0]
        first_text = self.doc_to_text(first)
        first_target = self.doc_to_target(first)
        self.multiple_input = len(self.doc_to_choice(first)) if has_choices and isinstance(first_text, int) else 0
        self.multiple_target = len(first_target) if isinstance(first_target, list) else 0

    # -- documents ------------------------------------------------------------------------

    def _raw_split(self, split: str) -> Any:
        try:
            return self.dataset[split]
        except KeyError:
            available = ", ".join(getattr(self.dataset, "keys", lambda: [])())
            raise UserError(f"Task {self.name!r}: the dataset has no split {split!r} (it has: {available}).") from None

    def _split_docs(self, split: str, process: Callable[..., Any] | None = None) -> list[dict[str, Any]]:
        docs = self._raw_split(split)
        process = process if process is not None else self.config.process_docs
        if process is not None:
            docs = process(docs)
        return [dict(doc) for doc in docs]

    @property
    def version(self) -> Any:
        return self.config.version

    @property
    def output_type(self) -> str:
        return self.config.output_type

    def selected_docs(self, *, limit: int | None, samples: Sequence[int] | None) -> list[tuple[int, dict[str, Any]]]:
        """(doc_id, doc) pairs to evaluate, as lm-eval's doc_iterator yields them on one rank."""
        if samples:
            wanted = set(samples)
            bad = [i for i in wanted if i >= len(self.eval_docs)]
            if bad:
                raise UserError(
                    f"--samples for task {self.name!r} names doc {bad[0]}, but the task has {len(self.eval_docs)} docs (0..{len(self.eval_docs) - 1})."
                )
            # lm-eval re-numbers the selected docs from 0 and maps back through the list later.
            return list(enumerate(doc for i, doc in enumerate(self.eval_docs) if i in wanted))
        chosen = self.eval_docs if limit is None else self.eval_docs[:limit]
        return list(enumerate(chosen))

    def fewshot_pool(self) -> list[dict[str, Any]]:
        cfg = self.fewshot_cfg
        if cfg.split is not None:
            return self._split_docs(cfg.split, cfg.process_docs)
        if cfg.samples is not None:
            samples = cfg.samples() if callable(cfg.samples) else cfg.samples
            if not isinstance(samples, list):
                raise UserError(f"Task {self.name!r}: fewshot_config.samples must be a list of docs or a function returning one.")
            return samples
        for split in (self.config.training_split, self.config.validation_split, self.config.test_split):
            if split is not None:
                return self._split_docs(split)
        return []

    def set_fewshot_seed(self, seed: int | None) -> None:
        self.fewshot_seed = seed
        if self._sampler is not None:
            self._sampler.reseed(seed)

    @property
    def sampler(self) -> DefaultSampler:
        if self._sampler is None:
            self._sampler = make_sampler(
                self.fewshot_cfg.sampler, self.fewshot_pool(), seed=self.fewshot_seed, fewshot_indices=self.fewshot_cfg.fewshot_indices
            )
        return self._sampler

    # -- prompts --------------------------------------------------------------------------

    def fewshot_context(self, doc: dict[str, Any], num_fewshot: int, settings: PromptSettings) -> str | list[str]:
        gen_prefix = self.gen_prefix(doc)
        template = None
        if settings.chat_template is not None:
            chat_template = settings.chat_template

            def template(messages: list[dict[str, str]]) -> str:
                return chat_template(messages, add_generation_prompt=not gen_prefix)

        messages: list[Message] = []
        system = join_with_space(settings.system_instruction, self.description(doc) or "", self.config.fewshot_delimiter)
        if system:
            messages.append(Message("system", system))
        if num_fewshot > 0:
            cfg = self.fewshot_cfg
            # lm-eval passes the eval doc for exclusion when the few-shot split "equals" the
            # test split — which includes both being unset.
            exclude = doc if cfg.split == self.config.test_split else None
            text_fn = self._override(cfg.doc_to_text, self.config.doc_to_text, templates.compile_text, self.doc_to_text)
            target_fn = self._override(cfg.doc_to_target, self.config.doc_to_target, templates.compile_target, self.doc_to_target)
            choice_fn = (
                self._choice_override(cfg.doc_to_choice) if cfg.doc_to_choice else None
            )
            prefix_fn = templates.compile_field(cfg.gen_prefix, self.features)
            for shot in self.sampler.sample(num_fewshot, exclude):
                question, choices, answer = text_fn(shot), choice_fn(shot) if choice_fn else None, target_fn(shot)
                if self.multiple_input:
                    question, choices = choices[question], None
                messages += qa_turn(
                    question=question,
                    choices=choices,
                    answer=answer,
                    gen_prefix=prefix_fn(shot),
                    target_delimiter=cfg.target_delimiter if cfg.target_delimiter is not None else self.config.target_delimiter,
                    fewshot_delimiter=cfg.fewshot_delimiter if cfg.fewshot_delimiter is not None else self.config.fewshot_delimiter,
                )
        question = self.doc_to_text(doc)
        choices = self.doc_to_choice(doc) if self.doc_to_choice else None
        if self.multiple_input:
            return [
                render_messages(messages + qa_turn(question=context, gen_prefix=gen_prefix, target_delimiter=""),
                                chat_template=template, fewshot_as_multiturn=settings.fewshot_as_multiturn)
                for context in choices
            ]
        messages += qa_turn(
            question=question, choices=choices, gen_prefix=gen_prefix, target_delimiter=self.config.target_delimiter, fewshot_delimiter=""
        )
        return render_messages(messages, chat_template=template, fewshot_as_multiturn=settings.fewshot_as_multiturn)

    def _override(self, spec: Any, own: Any, compile_fn: Callable[..., Any], default: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
        if spec is None or spec is own:
            return default
        return compile_fn(spec, self.features, has_choices=self.config.doc_to_choice is not None)

    def _choice_override(self, spec: Any) -> Callable[[dict[str, Any]], Any]:
        if spec is self.config.doc_to_choice and self.doc_to_choice is not None:
            return self.doc_to_choice
        return templates.compile_choice(spec, self.features)

    # -- requests -------------------------------------------------------------------------

    def build_requests(
        self, *, docs: Sequence[tuple[int, dict[str, Any]]], num_fewshot: int, settings: PromptSettings
    ) -> list[list[Instance]]:
        """Every document's requests, in document order (so few-shot draws match lm-eval)."""
        return [
            self.construct_requests(doc_id, doc, self.fewshot_context(doc, num_fewshot, settings), chat=settings.chat_template is not None)
            for doc_id, doc in docs
        ]

    def construct_requests(self, doc_id: int, doc: dict[str, Any], context: str | list[str], *, chat: bool = False) -> list[Instance]:
        output_type = self.config.output_type

        def instance(kind: Any, request: Any, idx: int = 0) -> Instance:
            return Instance(kind, request, doc, doc_id, idx, self.name, self.config.repeats)

        if output_type == "loglikelihood":
            return [instance("loglikelihood", LoglikelihoodRequest(context, self.doc_to_target(doc)))]
        if output_type == "loglikelihood_rolling":
            return [instance("loglikelihood_rolling", RollingRequest(self.doc_to_target(doc)))]
        if output_type == "generate_until":
            return [instance("generate_until", GenerationRequest(context, dict(self.config.generation_kwargs or {})))]
        delimiter = self.config.target_delimiter
        if chat:
            prefix = self.config.gen_prefix
            delimiter = delimiter if prefix and not prefix[-1:].isspace() else ""
        choices = self.doc_to_choice(doc)
        if self.multiple_input:
            continuation = f"{delimiter}{self.doc_to_target(doc)}"
            pairs = [(ctx, continuation) for ctx in context]
        else:
            pairs = [(context, f"{delimiter}{choice}") for choice in choices]
        if "acc_mutual_info" in self.metrics.fns:
            pairs += [("", f"{delimiter}{choice}") for choice in choices]
        return [instance("loglikelihood", LoglikelihoodRequest(ctx, cont), i) for i, (ctx, cont) in enumerate(pairs)]

    # -- scoring --------------------------------------------------------------------------

    def process_results(self, doc: dict[str, Any], results: list[Any]) -> dict[str, Any]:
        if callable(self.config.process_results):
            return self.config.process_results(doc, results)
        names = list(self.metrics.fns)
        output_type = self.config.output_type
        if output_type == "loglikelihood":
            return scoring.score_loglikelihood(results[0], names)
        if output_type == "loglikelihood_rolling":
            return scoring.score_rolling(results[0], self.doc_to_target(doc), names)
        if output_type == "multiple_choice":
            gold = self.doc_to_text(doc) if self.multiple_input else self.doc_to_target(doc)
            return scoring.score_multiple_choice(
                results, choices=self.doc_to_choice(doc), gold=gold, metrics=names, multiple_target=bool(self.multiple_target)
            )
        gold = self.doc_to_target(doc)
        if self.doc_to_choice is not None:
            gold = self.doc_to_choice(doc)[gold]
        scores = scoring.score_generation(
            results[0],
            gold=gold,
            metric_fns=self.metrics.fns,
            multiple_target=bool(self.multiple_target) and self.doc_to_choice is None,
            cast_gold=self.doc_to_choice is None and not self.multiple_target and "bypass" not in self.metrics.fns,
        )
        for key in scores:
            # A metric that returns several keys lends them its aggregation (lm-eval does the same).
            for name in self.metrics.fns:
                if key not in self.metrics.aggregations and name in self.metrics.aggregations:
                    self.metrics.aggregations[key] = self.metrics.aggregations[name]
                    self.metrics.higher_is_better[key] = self.metrics.higher_is_better[name]
        return scores

    def predict_only(self) -> None:
        """lm-eval's --predict_only: every metric replaced by `bypass`."""
        self.metrics = _MetricPlan.bypass()
        self.config.metric_list = [{"metric": "bypass"}]
        self.config.process_results = None

    def dump_config(self) -> dict[str, Any]:
        return self.config.to_dict()


@dataclasses.dataclass
class _MetricPlan:
    fns: dict[str, tuple[Callable[..., Any], dict[str, Any]]]
    aggregations: dict[str, Callable[[list[Any]], float]]
    higher_is_better: dict[str, bool]

    @classmethod
    def for_task(cls, config: TaskConfig) -> "_MetricPlan":
        from assay.runner.scoring.aggregations import AGGREGATIONS
        from assay.runner.scoring.metrics import DEFAULT_METRICS, METRICS

        plan = cls({}, {}, {})
        entries = config.metric_list if config.metric_list is not None else [{"metric": m} for m in DEFAULT_METRICS[config.output_type]]
        for entry in entries:
            if "metric" not in entry:
                raise UserError(f"Task {config.task!r}: every metric_list entry needs a 'metric' key.")
            metric = entry["metric"]
            kwargs = {k: v for k, v in entry.items() if k not in ("metric", "aggregation", "higher_is_better", "hf_evaluate")}
            if callable(metric):
                name, fn, spec = metric.__name__, metric, None
            else:
                name = metric
                spec = METRICS.get(metric) if metric in METRICS or config.process_results is None else None
                fn = spec.fn if spec is not None else None
            plan.fns[name] = (fn, kwargs) if config.process_results is None else (None, {})  # type: ignore[assignment]
            aggregation = entry.get("aggregation")
            if callable(aggregation):
                plan.aggregations[name] = aggregation
            elif isinstance(aggregation, str):
                plan.aggregations[name] = AGGREGATIONS.get(aggregation)
            elif spec is not None:
                plan.aggregations[name] = AGGREGATIONS.get(spec.aggregation)
            else:
                plan.aggregations[name] = AGGREGATIONS.get("mean")
            if "higher_is_better" in entry:
                plan.higher_is_better[name] = entry["higher_is_better"]
            else:
                plan.higher_is_better[name] = spec.higher_is_better if spec is not None else True
        return plan

    @classmethod
    def bypass(cls) -> "_MetricPlan":
        from assay.runner.scoring.aggregations import AGGREGATIONS
        from assay.runner.scoring.metrics import METRICS

        spec = METRICS.get("bypass")
        return cls({"bypass": (spec.fn, {})}, {"bypass": AGGREGATIONS.get(spec.aggregation)}, {"bypass": spec.higher_is_better})


def _build_filters(config: TaskConfig) -> list[Any]:
    from assay.runner.scoring.filters import build_filter_ensemble, default_filter_ensemble

    if config.filter_list is None:
        return [default_filter_ensemble()]
    ensembles = []
    for entry in config.filter_list:
        if "name" not in entry or "filter" not in entry:
            raise UserError(f"Task {config.task!r}: each filter_list entry needs 'name' and 'filter' keys.")
        ensembles.append(build_filter_ensemble(entry["name"], list(entry["filter"])))
    return ensembles
