"""What a task asks of a model: each document's prompt (with few-shot turns) and requests.

The `doc_to_*` fields are compiled once, when the task is built (see `templates`); how a
run wants the prompts (shots, seed, generation kwargs, chat template) is one `PromptPlan`,
given once before the first prompt (`follow`). The few-shot sampler is made on first use,
so a task that is only listed never reads its training split.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from assay.runner.models.instance import GenerationRequest, Instance, LoglikelihoodRequest, RequestType, RollingRequest
from assay.runner.tasks import templates
from assay.runner.tasks.config import TaskConfig
from assay.runner.tasks.documents import Doc, TaskDocuments
from assay.runner.tasks.fewshot import DefaultSampler, make_sampler
from assay.runner.tasks.prompt_plan import PromptPlan
from assay.runner.tasks.prompts import Message, join_with_space, qa_turn, render_messages

Context = str | list[str]
"""A prompt; a list of them for `multiple_input` tasks (one per choice)."""


class PromptBuilder:
    """Prompts and requests for one task's documents, in lm-eval 0.4.13's layout."""

    def __init__(self, config: TaskConfig, documents: TaskDocuments, *, plan: PromptPlan, tenant: bool = False) -> None:
        """`plan`: the prompts of a task no run configured yet (see `follow`). `tenant`: the task
        came from a tenant's task source; its template failures are told in a fixed sentence."""
        self.config = config
        self.tenant = tenant
        self.plan = plan
        self.name = config.task
        self.documents = documents
        features = documents.features
        self.features = features
        has_choices = config.doc_to_choice is not None
        self.doc_to_text = self._guard(
            templates.compile_text(config.doc_to_text, features, has_choices=has_choices), "doc_to_text"
        )
        self.doc_to_target = self._guard(
            templates.compile_target(config.doc_to_target, features, has_choices=has_choices), "doc_to_target"
        )
        self.doc_to_choice = (
            self._guard(templates.compile_choice(config.doc_to_choice, features), "doc_to_choice")
            if has_choices
            else None
        )
        self.description = self._guard(templates.compile_field(config.description, features), "description")
        self.gen_prefix = self._guard(templates.compile_field(config.gen_prefix, features), "gen_prefix")
        self.fewshot_cfg = config.fewshot
        self._sampler: DefaultSampler | None = None
        first = documents.eval_docs[0]
        first_text, first_target = self.doc_to_text(first), self.doc_to_target(first)
        # lm-eval's multiple_input: doc_to_text gives the gold index, each choice is a context.
        self.multiple_input = len(self.choices(first)) if has_choices and isinstance(first_text, int) else 0
        self.multiple_target = len(first_target) if isinstance(first_target, list) else 0

    def _guard(self, fn: templates.DocFn, field: str) -> templates.DocFn:
        return templates.guarded(fn, task=self.name, field=field, tenant=self.tenant)

    def choices(self, doc: Mapping[str, Any]) -> list[Any]:
        if self.doc_to_choice is None:
            raise TypeError(f"task {self.name!r} has no doc_to_choice")
        choices: list[Any] = self.doc_to_choice(doc)
        return choices

    # -- few-shot -------------------------------------------------------------------------

    def follow(self, plan: PromptPlan) -> None:
        """The run's plan, before its first prompt; the few-shot draws start again from its seed."""
        self.plan = plan
        if self._sampler is not None:
            self._sampler.reseed(plan.fewshot_seed)

    @property
    def sampler(self) -> DefaultSampler:
        if self._sampler is None:
            cfg = self.fewshot_cfg
            self._sampler = make_sampler(
                cfg.sampler,
                self.documents.fewshot_pool(cfg),
                seed=self.plan.fewshot_seed,
                fewshot_indices=cfg.fewshot_indices,
            )
        return self._sampler

    def _fewshot_turns(self, doc: Doc, num_fewshot: int) -> list[Message]:
        cfg = self.fewshot_cfg
        # lm-eval passes the eval doc for exclusion when the few-shot split "equals" the
        # test split — which includes both being unset.
        exclude = doc if cfg.split == self.config.test_split else None
        text_fn = self._override(
            cfg.doc_to_text, self.config.doc_to_text, templates.compile_text, self.doc_to_text, "doc_to_text"
        )
        target_fn = self._override(
            cfg.doc_to_target, self.config.doc_to_target, templates.compile_target, self.doc_to_target, "doc_to_target"
        )
        choice_fn = self._choice_override(cfg.doc_to_choice) if cfg.doc_to_choice else None
        prefix_fn = self._guard(templates.compile_field(cfg.gen_prefix, self.features), "fewshot_config.gen_prefix")
        target_delimiter = cfg.target_delimiter if cfg.target_delimiter is not None else self.config.target_delimiter
        fewshot_delimiter = (
            cfg.fewshot_delimiter if cfg.fewshot_delimiter is not None else self.config.fewshot_delimiter
        )
        turns: list[Message] = []
        for shot in self.sampler.sample(num_fewshot, exclude):
            question, choices, answer = text_fn(shot), choice_fn(shot) if choice_fn else None, target_fn(shot)
            if self.multiple_input:
                question, choices = choices[question], None  # type: ignore[index]  # multiple_input tasks have choices
            turns += qa_turn(
                question=question,
                choices=choices,
                answer=answer,
                gen_prefix=prefix_fn(shot),
                target_delimiter=target_delimiter,
                fewshot_delimiter=fewshot_delimiter,
            )
        return turns

    def _override(
        self, spec: Any, own: Any, compile_fn: Callable[..., templates.DocFn], default: templates.DocFn, field: str
    ) -> templates.DocFn:
        if spec is None or spec is own:
            return default
        compiled = compile_fn(spec, self.features, has_choices=self.config.doc_to_choice is not None)
        return self._guard(compiled, f"fewshot_config.{field}")

    def _choice_override(self, spec: Any) -> templates.DocFn:
        if spec is self.config.doc_to_choice and self.doc_to_choice is not None:
            return self.doc_to_choice
        return self._guard(templates.compile_choice(spec, self.features), "fewshot_config.doc_to_choice")

    # -- prompts --------------------------------------------------------------------------

    def fewshot_context(self, doc: Doc, plan: PromptPlan | None = None) -> Context:
        """The document's prompt as the run's plan wants it (or as `plan` does: `--check_integrity`'s zero-shot one)."""
        plan = self.plan if plan is None else plan
        settings, num_fewshot = plan.settings, plan.num_fewshot
        gen_prefix = self.gen_prefix(doc)
        template = None
        if settings.chat_template is not None:
            chat_template = settings.chat_template

            def template(messages: list[dict[str, str]]) -> str:
                return chat_template(messages, add_generation_prompt=not gen_prefix)

        messages: list[Message] = []
        system = join_with_space(
            settings.system_instruction, self.description(doc) or "", self.config.fewshot_delimiter
        )
        if system:
            messages.append(Message("system", system))
        if num_fewshot > 0:
            messages += self._fewshot_turns(doc, num_fewshot)
        question = self.doc_to_text(doc)
        choices = self.choices(doc) if self.doc_to_choice else None
        multiturn = settings.fewshot_as_multiturn
        if self.multiple_input:
            return [
                render_messages(
                    messages + qa_turn(question=context, gen_prefix=gen_prefix, target_delimiter=""),
                    chat_template=template,
                    fewshot_as_multiturn=multiturn,
                )
                for context in choices or []
            ]
        messages += qa_turn(
            question=question,
            choices=choices,
            gen_prefix=gen_prefix,
            target_delimiter=self.config.target_delimiter,
            fewshot_delimiter="",
        )
        return render_messages(messages, chat_template=template, fewshot_as_multiturn=multiturn)

    # -- requests -------------------------------------------------------------------------

    def build_requests(self, docs: Sequence[tuple[int, Doc]]) -> list[list[Instance]]:
        """Every document's requests, in document order (so few-shot draws match lm-eval)."""
        return [self.construct_requests(doc_id, doc, self.fewshot_context(doc)) for doc_id, doc in docs]

    def construct_requests(self, doc_id: int, doc: Doc, context: Context) -> list[Instance]:
        output_type = self.config.output_type

        def instance(kind: RequestType, request: Any, idx: int = 0) -> Instance:
            return Instance(kind, request, doc, doc_id, idx, self.name, self.config.repeats)

        if output_type == "loglikelihood":
            return [instance("loglikelihood", LoglikelihoodRequest(str(context), self.doc_to_target(doc)))]
        if output_type == "loglikelihood_rolling":
            return [instance("loglikelihood_rolling", RollingRequest(self.doc_to_target(doc)))]
        if output_type == "generate_until":
            generation_kwargs = dict(self.plan.generation_kwargs or {})
            return [instance("generate_until", GenerationRequest(str(context), generation_kwargs))]
        return [
            instance("loglikelihood", LoglikelihoodRequest(ctx, cont), i)
            for i, (ctx, cont) in enumerate(self._choice_pairs(doc, context))
        ]

    def _choice_pairs(self, doc: Doc, context: Context) -> list[tuple[str, str]]:
        """multiple_choice: (context, continuation) per choice, then the unconditioned ones."""
        delimiter = self.config.target_delimiter
        if self.plan.chat:
            prefix = self.config.gen_prefix
            delimiter = delimiter if prefix and not prefix[-1:].isspace() else ""
        choices = self.choices(doc)
        if self.multiple_input:  # one context per choice, one target
            continuation = f"{delimiter}{self.doc_to_target(doc)}"
            pairs = [(ctx, continuation) for ctx in context]
        else:
            pairs = [(str(context), f"{delimiter}{choice}") for choice in choices]
        if self.plan.unconditioned:
            pairs += [("", f"{delimiter}{choice}") for choice in choices]
        return pairs
