"""generate_until for HF models, batched as lm-eval batches it.

Requests are grouped by their generation kwargs (first-seen order), sorted within a group
by (−context tokens, context) and cut into batches; contexts are left-padded and
left-truncated to max_length − max_gen_toks. The decoded EOS joins the stop strings, the
output is cut at each stop string in turn, and an optional think_end_token strips the
reasoning trace first (`assay.runner.models.stops`: every backend's rules). The prompt
prefix a batch's prompts share (few-shot examples) runs once and batches start from its
cache (`prompt_prefix`).

Deliberate differences, both about *when generation stops*, never about the tokens chosen:
- each row stops as soon as its own text holds a stop string (lm-eval runs the whole batch
  until every row has hit the same stop string), so batches end earlier. The output is the
  same, except when one stop string contains another in its middle and the longer one is
  only completed by tokens lm-eval generates after the shorter one appeared.
- with think_end_token, stop strings count only after the end of the reasoning trace
  (lm-eval's stopping also fires on stop strings inside the trace, and then cuts nothing).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import transformers

from assay.errors import UserError
from assay.runner.models import stops
from assay.runner.models.encoding import Encoder
from assay.runner.models.hf import prompt_prefix, refill
from assay.runner.models.hf.batching import BatchPlan, detect_batch_size, free_memory, is_oom
from assay.runner.models.hf.prompt_prefix import PrefixCache
from assay.runner.models.instance import GenerationRequest

log = logging.getLogger(__name__)

DEFAULT_MAX_GEN_TOKS = 256


def normalize_gen_kwargs(
    gen_kwargs: Mapping[str, Any], default_max_gen_toks: int
) -> tuple[list[str], int, dict[str, Any]]:
    """(until, max_gen_toks, kwargs for HF generate) from a task's generation kwargs.

    Follows lm-eval: token-budget aliases in priority order; do_sample unset → sampling iff
    temperature > 0; do_sample False → temperature 0 (then dropped, greedy decoding).
    """
    kwargs = copy.deepcopy(dict(gen_kwargs))
    until = stops.until_list(kwargs.pop("until", None))
    max_gen_toks = stops.pop_max_gen_toks(kwargs, default_max_gen_toks)
    do_sample = kwargs.get("do_sample")
    temperature = float(kwargs.get("temperature", 0.0))
    if do_sample is None:
        kwargs["do_sample"] = temperature > 0.0
    elif do_sample is False:
        kwargs["temperature"] = 0.0
    kwargs.setdefault("temperature", 0.0)
    if kwargs.get("do_sample") is False and kwargs.get("temperature") == 0.0:
        kwargs.pop("temperature")  # greedy: HF warns about a temperature it would ignore
    return until, max_gen_toks, kwargs


def _group_key(gen_kwargs: Mapping[str, Any]) -> str:
    return repr(sorted((str(k), repr(v)) for k, v in gen_kwargs.items()))


class _RowStops(transformers.StoppingCriteria):
    """Marks a row finished once a stop string appears in its generated text."""

    def __init__(self, encoder: Encoder, stop_strings: list[str], start: int, think_end: str | int | None) -> None:
        self.encoder = encoder
        self.stops = [s for s in stop_strings if s]
        self.start = start
        self.think_end = think_end
        # byte-level tokens can be a single byte: 4 bytes per character bounds the lookback
        self.lookback = 4 * max((len(s) for s in self.stops), default=1) + 4
        self.done: torch.Tensor | None = None

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        if self.done is None:
            self.done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        if not self.stops:
            return self.done
        generated = input_ids[:, self.start :].tolist()
        for row, tokens in enumerate(generated):
            if bool(self.done[row]):
                continue
            text = self.row_text(tokens)
            if text is not None and any(stop in text for stop in self.stops):
                self.done[row] = True
        return self.done

    def row_text(self, tokens: list[int]) -> str | None:
        """The generated text a stop string is looked for in (its tail; past the thinking), or None."""
        if self.think_end is None:
            return self.encoder.decode(tokens[-self.lookback :], skip_special_tokens=False)
        return self._after_thinking(tokens)

    def _after_thinking(self, tokens: list[int]) -> str | None:
        if isinstance(self.think_end, int):
            if self.think_end not in tokens:
                return None
            last = len(tokens) - 1 - tokens[::-1].index(self.think_end)
            return self.encoder.decode(tokens[last + 1 :], skip_special_tokens=False)
        text = self.encoder.decode(tokens, skip_special_tokens=False)
        assert isinstance(self.think_end, str)
        return text.split(self.think_end)[-1] if self.think_end in text else None


class Generator:
    """Batched generate_until on one model."""

    def __init__(
        self,
        model: Any,
        encoder: Encoder,
        *,
        backend: str,
        max_length: int,
        device: torch.device,
        truncation: bool,
        eot_token_id: int,
        pad_token_id: int | None,
        think_end_token: str | int | None,
        mixed_precision_dtype: torch.dtype | None,
    ) -> None:
        self.model = model
        self.encoder = encoder
        self.backend = backend
        self.max_length = max_length
        self.device = device
        self.truncation = truncation
        self.eot_token_id = eot_token_id
        self.pad_token_id = pad_token_id
        self.think_end_token = think_end_token
        self.mixed_precision_dtype = mixed_precision_dtype
        self.prefix_blocker = prompt_prefix.prefix_blocker(model, backend=backend)
        self._prefix: PrefixCache | None = None  # the last batch's, kept while the next ones share it

    def _autocast(self) -> Any:
        return torch.autocast(
            device_type=self.device.type,
            dtype=self.mixed_precision_dtype,
            enabled=self.mixed_precision_dtype is not None,
        )

    def _prefix_for(
        self, rows: Sequence[Sequence[int]], hf_kwargs: dict[str, Any], upcoming: Sequence[Sequence[int]]
    ) -> PrefixCache | None:
        """The prompt prefix this batch's rows share, run once, or None.

        The last batch's prefix is kept while it fits. A new one is what this batch shares
        with the next batch's prompts (`upcoming`), so that it can be kept, else what this
        batch's rows share among themselves.
        """
        if self.prefix_blocker is not None or not prompt_prefix.kwargs_allow_prefix(hf_kwargs):
            return None
        if self._prefix is not None and self._prefix.fits(rows):
            return self._prefix
        candidates = [list(rows) + list(upcoming)] if upcoming else []
        if len(rows) > 1:
            candidates.append(list(rows))
        for group in candidates:
            prefix = prompt_prefix.common_prefix(group)
            if len(prefix) >= prompt_prefix.MIN_SHARED_TOKENS and prompt_prefix.starts_all(prefix, rows):
                with torch.no_grad(), self._autocast():
                    self._prefix = PrefixCache(self.model, prefix, device=self.device)
                return self._prefix
        return None

    def run(
        self,
        requests: Sequence[GenerationRequest],
        plan: BatchPlan,
        on_done: Callable[[Sequence[tuple[int, str]]], None],
    ) -> list[str]:
        """Each request's text, in input order; `on_done` hears each batch's (index, text) pairs."""
        results: list[str | None] = [None] * len(requests)
        groups: dict[str, list[int]] = {}
        for index, request in enumerate(requests):
            if not isinstance(request.gen_kwargs, Mapping):
                raise UserError(f"generation kwargs must be a mapping, not {type(request.gen_kwargs).__name__}.")
            groups.setdefault(_group_key(request.gen_kwargs), []).append(index)
        prompts = self.encoder.encode_many([r.context for r in requests])
        try:
            self._run_groups(requests, groups, prompts, plan, on_done, results)
        finally:
            self._prefix = None  # its keys and values are only worth keeping within one call
        return [r if r is not None else "" for r in results]

    def _run_groups(
        self,
        requests: Sequence[GenerationRequest],
        groups: dict[str, list[int]],
        prompts: list[list[int]],
        plan: BatchPlan,
        on_done: Callable[[Sequence[tuple[int, str]]], None],
        results: list[str | None],
    ) -> None:
        eos_text = self.encoder.decode([self.eot_token_id], skip_special_tokens=False)
        batch_size: int | None = plan.fixed
        for indices in groups.values():
            indices.sort(key=lambda i: (-len(prompts[i]), requests[i].context))
            until, max_gen_toks, hf_kwargs = normalize_gen_kwargs(requests[indices[0]].gen_kwargs, DEFAULT_MAX_GEN_TOKS)
            until = stops.with_eos(until, eos_text)
            if self.backend == "causal":
                max_ctx = self.max_length - max_gen_toks
                if max_ctx <= 0:
                    raise UserError(
                        f"max_gen_toks={max_gen_toks} leaves no room for the prompt within max_length {self.max_length}; lower max_gen_toks or raise max_length."
                    )
            else:
                max_ctx = self.max_length
            if batch_size is None:
                longest = requests[indices[0]].context
                batch_size = detect_batch_size(
                    self.device,
                    plan.max_batch_size,
                    lambda n: self._trial(longest, n, max_ctx, max_gen_toks),  # noqa: B023 - called within this iteration
                )
            if self._refills(hf_kwargs):
                batch_size = self._run_refilling(
                    requests, indices, until, max_gen_toks, max_ctx, hf_kwargs, plan, batch_size, on_done, results
                )
                continue
            pos = 0
            while pos < len(indices):
                chunk = indices[pos : pos + batch_size]
                upcoming = [prompts[i] for i in indices[pos + batch_size : pos + 2 * batch_size]]
                try:
                    texts = self._generate(
                        [requests[i].context for i in chunk], until, max_gen_toks, max_ctx, hf_kwargs, upcoming
                    )
                except Exception as err:
                    batch_size = _halved_after_oom(err, batch_size, rows=len(chunk), auto=plan.auto)
                    continue
                for i, text in zip(chunk, texts, strict=False):
                    results[i] = text
                on_done(list(zip(chunk, texts, strict=False)))
                pos += len(chunk)

    def _refills(self, hf_kwargs: dict[str, Any]) -> bool:
        """Whether this group runs through a batch that refills (`refill`): causal, greedy, cache shareable."""
        return (
            self.backend == "causal"
            and self.think_end_token is None
            and self.prefix_blocker is None
            and refill.refill_blocker(self.model, hf_kwargs) is None
            and bool(prompt_prefix.static_cache_kwargs(self.model, 1))
        )

    def _run_refilling(
        self,
        requests: Sequence[GenerationRequest],
        indices: list[int],
        until: list[str],
        max_gen_toks: int,
        max_ctx: int,
        hf_kwargs: dict[str, Any],
        plan: BatchPlan,
        batch_size: int,
        on_done: Callable[[Sequence[tuple[int, str]]], None],
        results: list[str | None],
    ) -> int:
        """One group through `batch_size` rows that refill as rows finish; the batch size it ended with."""
        # prompts tokenized per lm-eval batch, as lm-eval does (special tokens follow a batch's first text)
        prompts: list[tuple[int, list[int]]] = []
        for start in range(0, len(indices), batch_size):
            chunk = indices[start : start + batch_size]
            ids, mask = self.encoder.batch_encode_left(
                [requests[i].context for i in chunk], left_truncate_len=max_ctx, truncation=self.truncation
            )
            prompts += [(i, row[keep.bool()].tolist()) for i, row, keep in zip(chunk, ids, mask, strict=False)]
        stop_check = _RowStops(self.encoder, until, 0, None)

        def stopped(tokens: list[int]) -> bool:
            return bool(stop_check.stops) and any(s in (stop_check.row_text(tokens) or "") for s in stop_check.stops)

        def on_row(index: int, tokens: list[int]) -> None:
            results[index] = self._text(tokens, until)
            on_done([(index, results[index] or "")])

        decoder = refill.RefillDecoder(
            self.model,
            device=self.device,
            autocast=self._autocast,
            prefix_for=lambda rows, upcoming: self._prefix_for(rows, hf_kwargs, upcoming),
        )
        while True:
            todo = [(i, p) for i, p in prompts if results[i] is None]
            try:
                decoder.run(todo, slots=batch_size, max_gen_toks=max_gen_toks, stopped=stopped, on_row=on_row)
                return batch_size
            except Exception as err:
                batch_size = _halved_after_oom(err, batch_size, rows=batch_size, auto=plan.auto)

    def _trial(self, context: str, batch: int, max_ctx: int, max_gen_toks: int) -> None:
        ids, _ = self.encoder.batch_encode_left([context], left_truncate_len=max_ctx, truncation=self.truncation)
        width = min(self.max_length, ids.shape[1] + max_gen_toks) if self.backend == "causal" else ids.shape[1]
        row = ids[0].repeat((width + ids.shape[1] - 1) // ids.shape[1])[:width]
        inputs = row.unsqueeze(0).expand(batch, -1).contiguous().to(self.device)
        with torch.no_grad():
            if self.backend == "causal":
                self.model(inputs)
            else:
                self.model(input_ids=inputs, decoder_input_ids=inputs[:, : max(1, min(width, max_gen_toks))])

    def _generate(
        self,
        contexts: list[str],
        until: list[str],
        max_gen_toks: int,
        max_ctx: int,
        hf_kwargs: dict[str, Any],
        upcoming: Sequence[Sequence[int]],
    ) -> list[str]:
        ids, mask = self.encoder.batch_encode_left(contexts, left_truncate_len=max_ctx, truncation=self.truncation)
        kwargs = dict(hf_kwargs)
        # lm-eval passes max_length = prompt width + max_gen_toks for both backends (for
        # seq2seq that bounds the decoder side: a quirk kept so outputs are the same)
        max_length = kwargs.pop("max_length", ids.shape[1] + max_gen_toks)
        rows = [row[keep.bool()].tolist() for row, keep in zip(ids, mask, strict=False)]
        prefix = self._prefix_for(rows, hf_kwargs, upcoming)
        if prefix is not None:
            # same width as the left-padded batch, so generated tokens start at the same index
            ids, mask = prefix.layout(rows, self.pad_token_id if self.pad_token_id is not None else 0)
            kwargs.update(prefix.batch_cache(len(rows), max_length))
        else:
            ids, mask = ids.to(self.device), mask.to(self.device)
            if self.prefix_blocker is None and prompt_prefix.kwargs_allow_prefix(hf_kwargs):
                kwargs.update(prompt_prefix.static_cache_kwargs(self.model, max_length))
        start = ids.shape[1] if self.backend == "causal" else 1
        stopping = transformers.StoppingCriteriaList([_RowStops(self.encoder, until, start, self.think_end_token)])
        with torch.no_grad(), self._autocast():
            out = self.model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_length=max_length,
                stopping_criteria=stopping,
                pad_token_id=self.pad_token_id,
                use_cache=True,
                **kwargs,
            )
        return [self._text(row[ids.shape[1] :] if self.backend == "causal" else row, until) for row in out.tolist()]

    def _text(self, tokens: list[int], until: list[str]) -> str:
        """A row's generated tokens as the text lm-eval returns: decoded, past the thinking, cut at the stops."""
        think_str = self.think_end_token if isinstance(self.think_end_token, str) else None
        if isinstance(self.think_end_token, int) and self.think_end_token in tokens:
            tokens = tokens[len(tokens) - tokens[::-1].index(self.think_end_token) :]
            text = self.encoder.decode(tokens).lstrip()
        else:
            text = self.encoder.decode(tokens)
            if isinstance(self.think_end_token, int):
                text = text.lstrip()
        return stops.cut_at_stops(text, until, think_str)


def _halved_after_oom(err: Exception, batch_size: int, *, rows: int, auto: bool) -> int:
    """The batch size to try next after `err` (re-raised unless it is out of memory): half,
    where batch_size=auto allows it and there is more than one row to halve."""
    if not is_oom(err):
        raise err
    free_memory()
    if not auto or batch_size == 1:
        raise UserError(
            f"Out of GPU memory generating a batch of {rows}; use a smaller batch_size (or batch_size=auto)."
        ) from None
    return max(1, batch_size // 2)
