"""What a task evaluates on: its dataset's splits, as lists of plain dicts.

Loaded once when the task is built; requests and scores only read them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from assay.booleans import optional_bool
from assay.errors import UserError
from assay.runner.tasks.config import FewshotConfig, TaskConfig

Doc = dict[str, Any]
log = logging.getLogger(__name__)


def _load_dataset(config: TaskConfig, *, tenant: bool) -> Any:
    if config.custom_dataset is not None:
        with _local().quiet_progress():
            return config.custom_dataset(**(config.metadata or {}), **(config.dataset_kwargs or {}))
    kwargs = dict(config.dataset_kwargs or {})
    # datasets >= 4 dropped dataset scripts; lm-eval removes the flag the same way.
    trust = bool(
        optional_bool(
            kwargs.pop("trust_remote_code", False), name=f"Task {config.task!r} dataset_kwargs.trust_remote_code"
        )
    )
    if config.dataset_path is None:
        raise UserError(f"Task {config.task!r} sets no dataset_path; add one (or a custom_dataset function).")
    if tenant:  # before anything is read: a tenant's data is the hub's or the datasets directory's
        from assay.runner.data import tenant_data

        kwargs = tenant_data.confine(config.task, config.dataset_path, config.dataset_name, kwargs)
    # process_docs functions take a `datasets.Dataset` (they call .map); without one, plain rows will do.
    plain = config.process_docs is None and (config.fewshot_config or {}).get("process_docs") is None
    return _local().load_task_dataset(
        config.dataset_path, config.dataset_name, kwargs, trust_remote_code=trust, plain=plain
    )


def _source(config: TaskConfig) -> str:
    if config.custom_dataset is not None:
        return "its custom_dataset function"
    return str(_local().source_of(str(config.dataset_path), config.dataset_name, config.dataset_kwargs))


def _local() -> Any:
    """The local-data module, imported on first use: it imports `datasets`, which the operator lacks."""
    from assay.runner.data import local

    return local


def _column_names(docs: Any) -> list[str]:
    names = getattr(docs, "column_names", None)
    if names is not None:
        return list(names)
    return list(docs[0].keys()) if len(docs) else []


class TaskDocuments:
    """The evaluation split (processed by `process_docs`) and the few-shot pool's sources."""

    def __init__(self, config: TaskConfig, *, tenant: bool = False) -> None:
        self.config = config
        self.name = config.task
        self.dataset = _load_dataset(config, tenant=tenant)
        eval_split = config.test_split or config.validation_split
        if eval_split is None:
            raise UserError(f"Task {self.name!r} has neither test_split nor validation_split; set one of them.")
        self.eval_split: str = eval_split
        self.eval_docs: list[Doc] = self.split_docs(eval_split)
        if not self.eval_docs:
            raise UserError(f"Task {self.name!r}: split {eval_split!r} has no documents.")
        log.info("%s: %d %s documents from %s", self.name, len(self.eval_docs), eval_split, _source(config))
        self.features = _column_names(self._raw_split(eval_split))
        if set(self.eval_docs[0]) - set(self.features):
            self.features = list(self.eval_docs[0].keys())

    def _raw_split(self, split: str) -> Any:
        try:
            return self.dataset[split]
        except KeyError:
            available = ", ".join(getattr(self.dataset, "keys", lambda: [])())
            raise UserError(f"Task {self.name!r}: the dataset has no split {split!r} (it has: {available}).") from None

    def split_docs(self, split: str, process: Callable[..., Any] | None = None) -> list[Doc]:
        docs = self._raw_split(split)
        process = process if process is not None else self.config.process_docs
        if process is not None:
            with _local().quiet_progress():  # a `datasets` map draws one bar per split
                docs = process(docs)
        return [dict(doc) for doc in docs]

    def selected(self, *, limit: int | None, samples: Sequence[int] | None) -> list[tuple[int, Doc]]:
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

    def fewshot_pool(self, cfg: FewshotConfig) -> list[Doc]:
        if cfg.split is not None:
            return self.split_docs(cfg.split, cfg.process_docs)
        if cfg.samples is not None:
            samples = cfg.samples() if callable(cfg.samples) else cfg.samples
            if not isinstance(samples, list):
                raise UserError(
                    f"Task {self.name!r}: fewshot_config.samples must be a list of docs or a function returning one."
                )
            return samples
        for split in (self.config.training_split, self.config.validation_split, self.config.test_split):
            if split is not None:
                return self.split_docs(split)
        return []
