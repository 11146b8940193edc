"""Log-likelihood scoring of token pairs, for causal and seq2seq models.

Batches are formed exactly as lm-eval forms them, so that each request sees the same padded
shapes and gets the same number: requests are sorted by (−total length, tokens); for causal
models, requests sharing `context + continuation[:-1]` are scored from one forward pass of
the one with the longest continuation (MMLU's " A"/" B"/" C"/" D" cost one pass); causal
inputs are `(ctx + cont)[-(max_length + 1):][:-1]`, right-padded with id 0 and no mask.

What Assay does differently, for speed only: the LM head runs on the continuation
positions alone where the model supports `logits_to_keep`, and log-softmax runs on the
scored positions only — the same per-position arithmetic on far fewer rows; requests that
share a whole context (a multiple-choice document's choices) run it once, on a KV cache
(`shared_context`), where the model's cache allows that.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from assay.errors import UserError
from assay.runner.models.hf import document_passes, shared_context
from assay.runner.models.hf.answers import Answers, OnDone, ignore
from assay.runner.models.hf.batching import BatchPlan, detect_batch_size, free_memory, is_oom
from assay.runner.models.instance import LoglikelihoodResult
from assay.runner.models.token_pairs import TokenPair


class Scorer:
    """Runs the forward passes for loglikelihood (and rolling windows) on one model."""

    def __init__(
        self,
        model: Any,
        *,
        backend: str,
        max_length: int,
        device: torch.device,
        logits_cache: bool,
        softmax_dtype: torch.dtype | None,
        mixed_precision_dtype: torch.dtype | None,
    ) -> None:
        self.model = model
        self.backend = backend
        self.max_length = max_length
        self.device = device
        self.logits_cache = logits_cache
        self.softmax_dtype = softmax_dtype
        self.mixed_precision_dtype = mixed_precision_dtype
        self._keep_logits = backend == "causal" and _accepts(model, "logits_to_keep")
        # why each context cannot run once for all its continuations (None: it can)
        self.share_blocker = (
            shared_context.sharing_blocker(model, backend=backend) if logits_cache else "logits_cache=False"
        )
        self.shared = (
            None
            if self.share_blocker is not None
            else shared_context.SharedContextScorer(
                model,
                device=device,
                softmax_dtype=softmax_dtype,
                autocast=self._autocast,
                keep_logits=self._keep_logits,
            )
        )

    # -- model calls --------------------------------------------------------------------

    def _autocast(self) -> Any:
        if self.mixed_precision_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.mixed_precision_dtype)

    def causal_logits(self, inputs: torch.Tensor, keep: int | None = None) -> torch.Tensor:
        """Logits of the last `keep` positions (all when None), shape [batch, keep, vocab]."""
        with torch.no_grad(), self._autocast():
            if keep is not None and self._keep_logits:
                logits = self.model(inputs, logits_to_keep=keep).logits
            else:
                logits = self.model(inputs).logits
        if keep is not None and logits.shape[1] != keep:
            logits = logits[:, -keep:]
        result: torch.Tensor = logits
        return result

    def seq2seq_logits(self, inputs: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        with torch.no_grad(), self._autocast():
            logits: torch.Tensor = self.model(input_ids=inputs, attention_mask=mask, labels=labels).logits
        return logits

    # -- loglikelihood ------------------------------------------------------------------

    def score(
        self,
        pairs: Sequence[TokenPair],
        plan: BatchPlan,
        *,
        override_batch: int | None = None,
        on_done: OnDone = ignore,
    ) -> list[LoglikelihoodResult]:
        """(logprob, is_greedy) of each continuation given its context, in input order.

        `on_done` hears every index once, with its final result, as its batch finishes.
        """
        results: list[LoglikelihoodResult | None] = [None] * len(pairs)
        groups: dict[tuple[int, ...], list[int]] = {}
        empty: list[tuple[int, LoglikelihoodResult]] = []
        for index, (ctx, cont) in enumerate(pairs):
            if not cont:
                # lm-eval asserts here; an empty continuation has probability 1 and is greedy
                empty.append((index, LoglikelihoodResult(0.0, True)))
                results[index] = empty[-1][1]
                continue
            if len(cont) > self.max_length:
                raise UserError(
                    f"A continuation of {len(cont)} tokens is longer than the model's max_length {self.max_length}; it cannot be scored."
                )
            key = tuple(ctx + cont[:-1]) if self.backend == "causal" and self.logits_cache else (index,)
            groups.setdefault(key, []).append(index)
        if empty:
            on_done(empty)
        # one representative per group: the first with the longest continuation
        reps = [max(members, key=lambda i: len(pairs[i][1])) for members in groups.values()]
        members_of = {rep: members for rep, members in zip(reps, groups.values(), strict=False)}
        reps.sort(key=lambda i: (-(len(pairs[i][0]) + len(pairs[i][1])), tuple(pairs[i][0] + pairs[i][1])))

        answers = Answers(pairs, members_of, results, on_done)
        if self.shared is not None:
            planned, reps = document_passes.plan_shared(reps, pairs, self.max_length)
            # several documents per pass only where the LM head can run on scored positions alone
            together = bool(planned) and self.shared.head_apart()
            size = (override_batch or plan.fixed or plan.max_batch_size) if together else 1
            if together:
                planned = document_passes.batch_order(planned, pairs)
            try:
                for kind, items in document_passes.passes(planned, pairs, size):
                    if not together:
                        self._run_shared(items[0][0], items[0][1], answers, plan)
                    elif kind == "rows" and len(items) > 1:
                        lone = [group[0] for group, _ in items]
                        self._run_on_prefix(lone, items[0][1], answers, plan)
                    else:
                        self._run_groups(items, answers, plan)
            finally:
                self.shared.release()
        for chunk in self._chunks(reps, pairs, plan, override_batch):
            self._run_chunk(chunk, answers, plan)
        assert all(r is not None for r in results)
        return [r for r in results if r is not None]

    def _chunks(
        self, reps: list[int], pairs: Sequence[TokenPair], plan: BatchPlan, override: int | None
    ) -> Iterator[list[int]]:
        if not reps:
            return
        size_at: Callable[[int], int]
        if override is not None or plan.fixed is not None:
            constant = override if override is not None else plan.fixed
            assert constant is not None
            size_at = functools.partial(_constant, constant)
        else:
            # auto:N re-detects N times over the sorted requests (lm-eval's schedule)
            segment = max(1, int(len(reps) / plan.schedule))
            sizes: dict[int, int] = {}

            def size_at(pos: int) -> int:
                sched = pos // segment
                if sched not in sizes:
                    if sizes.get(sched - 1) == plan.max_batch_size:
                        sizes[sched] = plan.max_batch_size
                    else:
                        sizes[sched] = detect_batch_size(
                            self.device, plan.max_batch_size, lambda n: self.trial(pairs[reps[pos]], n)
                        )
                    plan.found[sched] = sizes[sched]
                return sizes[sched]

        pos = 0
        while pos < len(reps):
            size = size_at(pos)
            yield reps[pos : pos + size]
            pos += size

    def trial(self, pair: TokenPair, batch: int) -> None:
        """One forward pass of `batch` copies of a real request, to probe memory."""
        ctx, cont = pair
        if self.backend == "causal":
            row = (ctx + cont)[-(self.max_length + 1) :][:-1]
            inputs = torch.tensor([row] * batch, dtype=torch.long, device=self.device)
            F.log_softmax(self.causal_logits(inputs), dim=-1, dtype=self.softmax_dtype)
        else:
            length = max(len(ctx[-self.max_length :]), len(cont[-self.max_length :]))
            ones = torch.ones((batch, length), dtype=torch.long, device=self.device)
            F.log_softmax(self.seq2seq_logits(ones, ones, ones), dim=-1, dtype=self.softmax_dtype)

    def _run_chunk(
        self,
        chunk: list[int],
        answers: Answers,
        plan: BatchPlan,
    ) -> None:
        try:
            scored = self._forward_chunk(chunk, answers.pairs)
        except Exception as err:
            if not is_oom(err):
                raise
            free_memory()
            if not plan.auto or len(chunk) == 1:
                raise UserError(
                    f"Out of GPU memory on a batch of {len(chunk)} requests; use a smaller batch_size (or batch_size=auto)."
                ) from None
            half = len(chunk) // 2
            self._run_chunk(chunk[:half], answers, plan)
            self._run_chunk(chunk[half:], answers, plan)
            return
        answers.from_log_probs(chunk, scored)

    def _run_shared(
        self,
        group: list[int],
        prefix: list[int],
        answers: Answers,
        plan: BatchPlan,
    ) -> None:
        assert self.shared is not None
        try:
            scored = self.shared.score_group(group, answers.pairs, prefix)
        except Exception as err:
            if not is_oom(err):
                raise
            free_memory()  # the choices repeated the context's cache: one full row each uses less
            for chunk in self._chunks(group, answers.pairs, plan, None):
                self._run_chunk(chunk, answers, plan)
            return
        answers.from_log_probs(group, scored)

    def _run_groups(
        self,
        items: list[document_passes.Planned],
        answers: Answers,
        plan: BatchPlan,
    ) -> None:
        assert self.shared is not None
        try:
            scored = self.shared.score_groups(items, answers.pairs)
        except Exception as err:
            if not is_oom(err):
                raise
            free_memory()
            for group, prefix in items:
                self._run_shared(group, prefix, answers, plan)
            return
        answers.from_pass([group for group, _ in items], scored)

    def _run_on_prefix(
        self,
        chunk: list[int],
        prefix: list[int],
        answers: Answers,
        plan: BatchPlan,
    ) -> None:
        assert self.shared is not None
        try:
            scored = self.shared.score_rows(chunk, answers.pairs, prefix)
        except Exception as err:
            if not is_oom(err):
                raise
            free_memory()  # the prefix's cache once per row did not fit: one document at a time
            for rep in chunk:
                self._run_shared([rep], prefix, answers, plan)
            return
        answers.from_log_probs(chunk, scored)

    def _forward_chunk(self, chunk: list[int], pairs: Sequence[TokenPair]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per request: log-probs [contlen, vocab] at its continuation positions, and their argmax."""
        if self.backend == "causal":
            rows = [(pairs[i][0] + pairs[i][1])[-(self.max_length + 1) :][:-1] for i in chunk]
            width = max(len(r) for r in rows)
            inputs = torch.zeros((len(rows), width), dtype=torch.long)
            for b, row in enumerate(rows):
                inputs[b, : len(row)] = torch.tensor(row, dtype=torch.long)
            spans = [(len(row) - len(pairs[i][1]), len(row)) for i, row in zip(chunk, rows, strict=False)]
            keep = width - min(start for start, _ in spans)
            logits = self.causal_logits(inputs.to(self.device), keep=keep)
            offset = width - keep
            out = []
            for b, (start, end) in enumerate(spans):
                selected = F.log_softmax(logits[b, start - offset : end - offset], dim=-1, dtype=self.softmax_dtype)
                out.append((selected, selected.argmax(dim=-1)))
            return out
        ctxs = [pairs[i][0][-self.max_length :] for i in chunk]
        conts = [pairs[i][1][-self.max_length :] for i in chunk]
        enc_width, dec_width = max(len(c) for c in ctxs), max(len(c) for c in conts)
        inputs = torch.zeros((len(chunk), enc_width), dtype=torch.long)
        mask = torch.zeros((len(chunk), enc_width), dtype=torch.long)
        labels = torch.zeros((len(chunk), dec_width), dtype=torch.long)
        for b, (ctx, cont) in enumerate(zip(ctxs, conts, strict=False)):
            inputs[b, : len(ctx)] = torch.tensor(ctx, dtype=torch.long)
            mask[b, : len(ctx)] = 1
            labels[b, : len(cont)] = torch.tensor(cont, dtype=torch.long)
        logits = self.seq2seq_logits(inputs.to(self.device), mask.to(self.device), labels.to(self.device))
        out = []
        for b, cont in enumerate(conts):
            selected = F.log_softmax(logits[b, : len(cont)], dim=-1, dtype=self.softmax_dtype)
            out.append((selected, selected.argmax(dim=-1)))
        return out


def _accepts(model: Any, name: str) -> bool:
    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError, AttributeError):
        return False


def _constant(size: int, pos: int) -> int:
    """One batch size wherever the requests are."""
    return size
