"""Greedy generation through a batch that refills: a finished row leaves, the next prompt takes its place.

lm-eval runs each batch until its last row stops, so a batch's rows that stop early sit idle
(padding) for the rest of it. Here the batch is a set of slots over one static cache: when a
row finishes (a stop string, EOS, or `max_gen_toks`), the next prompt in lm-eval's order is
run (its prompt pass, on the shared prompt prefix's cache where there is one) and its keys
and values are written into the free row, while the other rows keep theirs and go on.

Layout. Every row's tokens sit contiguous and end at the same cache column `cur` (left
padding, as lm-eval's): a decode step writes all rows' next token at column `cur`. A new
row's prompt (never longer than the first, since prompts come longest first) is written to
end at `cur` too, masked before its start. Position ids are each row's own token count, so
every token keeps the position lm-eval gives it (left padding's rule: positions from the
attention mask's running sum). When `cur` reaches the cache's end, the occupied columns move
to its start. When no prompt is left, the cache keeps only the rows still running.

Greedy only, on models whose generation config adds no logits processors
(`refill_blocker`): the tokens chosen are argmax of the same logits generate would compute,
up to the float rounding that a different batch shape brings (as for any batch size).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
import transformers

from assay.runner.models.hf import prompt_prefix
from assay.runner.models.hf.prompt_prefix import PrefixCache

# generation-config fields that do not change which token greedy decoding picks
_INERT_CONFIG_FIELDS = frozenset(
    {
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "decoder_start_token_id",
        "do_sample",
        "temperature",
        "top_k",
        "top_p",
        "min_p",
        "typical_p",
        "max_length",
        "max_new_tokens",
        "use_cache",
        "transformers_version",
        "_from_model_config",
        "return_dict_in_generate",
        "output_scores",
        "output_logits",
        "output_attentions",
        "output_hidden_states",
    }
)


def refill_blocker(model: Any, hf_kwargs: dict[str, Any]) -> str | None:
    """Why these generate kwargs on this model cannot run through a refilling batch, or None."""
    if set(hf_kwargs) - {"do_sample"} or hf_kwargs.get("do_sample") is not False:
        return "not greedy decoding"
    config = getattr(model, "generation_config", None)
    if config is not None:
        if getattr(config, "do_sample", False):
            return "the model's generation config samples"
        active = set(config.to_diff_dict()) - _INERT_CONFIG_FIELDS
        if active:
            return f"the model's generation config sets {', '.join(sorted(active))}"
    return None


def eos_ids(model: Any) -> frozenset[int]:
    """The token ids at which generate stops a row (the model's generation config)."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        return frozenset()
    return frozenset(int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]))


@dataclasses.dataclass
class _Row:
    index: int  # the caller's index of this prompt
    length: int  # tokens of this row in the cache
    generated: list[int]


class RefillDecoder:
    """Greedy decoding of many prompts through `slots` cache rows that refill as rows finish."""

    def __init__(
        self,
        model: Any,
        *,
        device: torch.device,
        autocast: Callable[[], Any],
        prefix_for: Callable[[Sequence[Sequence[int]], Sequence[Sequence[int]]], PrefixCache | None],
    ) -> None:
        self.model = model
        self.device = device
        self.autocast = autocast
        self.prefix_for = prefix_for
        self.cache_arg = prompt_prefix.cache_kwarg(model)
        self.eos = eos_ids(model)
        # only the last position's logits are wanted, where the model can skip the others
        self.keep = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}

    def run(
        self,
        prompts: Sequence[tuple[int, list[int]]],
        *,
        slots: int,
        max_gen_toks: int,
        stopped: Callable[[list[int]], bool],
        on_row: Callable[[int, list[int]], None],
    ) -> None:
        """Generate for each (index, prompt tokens), longest prompt first; `on_row` hears each
        finished row's index and generated tokens, as it finishes."""
        if not prompts:
            return
        pending = list(prompts)
        longest = max(len(p) for _, p in pending)
        # room for the longest prompt and its generation, and `slack` steps between moves
        capacity = longest + max_gen_toks + max(max_gen_toks, 64)
        batch = _Batch(self.model.config, min(slots, len(pending)), capacity, longest, self.device)

        def settle(slot: int) -> None:
            """Hand a finished row back and free its slot."""
            row = batch.rows[slot]
            if row is not None and (
                len(row.generated) >= max_gen_toks or row.generated[-1] in self.eos or stopped(row.generated)
            ):
                on_row(row.index, row.generated)
                batch.rows[slot] = None
                batch.mask[slot] = 0

        with torch.no_grad(), self.autocast():
            while True:
                free = [s for s, r in enumerate(batch.rows) if r is None]
                if free and pending:
                    newcomers, pending = pending[: len(free)], pending[len(free) :]
                    needed = max(len(p) for _, p in newcomers)
                    if needed > batch.cur:  # a prompt longer than the rows' span so far: move them right
                        batch.move_to(needed)
                    upcoming = [p for _, p in pending[:slots]]
                    first = self._admit(batch.cache, batch.mask, batch.cur, free, newcomers, upcoming, len(batch.rows))
                    for slot, (index, prompt), token in zip(free, newcomers, first, strict=False):
                        batch.rows[slot] = _Row(index, len(prompt), [token])
                        batch.last[slot] = token
                        settle(slot)
                    continue
                if not batch.keep_running_rows():
                    return
                if batch.cur == capacity:  # back to the cache's start, with room for every prompt to come
                    batch.move_to(max([batch.span()] + [len(p) for _, p in pending[:1]]))
                self._step(batch)
                for slot in range(len(batch.rows)):
                    settle(slot)

    def _step(self, batch: _Batch) -> None:
        """One decode step: every row's last token in at column `cur`, its next token chosen."""
        positions = torch.tensor([[r.length if r else 0] for r in batch.rows], device=self.device)
        batch.mask[:, batch.cur] = 1
        for layer in batch.cache.layers:  # where a static layer writes next (and the mask's query offset)
            layer.cumulative_length.fill_(batch.cur)
        out = self.model(
            input_ids=batch.last.unsqueeze(1),
            attention_mask=batch.mask,
            position_ids=positions,
            use_cache=True,
            **self.keep,
            **{self.cache_arg: batch.cache},
        )
        batch.cur += 1
        batch.last = out.logits[:, -1].argmax(-1)
        for row, token in zip(batch.rows, batch.last.tolist(), strict=False):
            assert row is not None
            row.length += 1
            row.generated.append(int(token))

    def _admit(
        self,
        cache: Any,
        mask: torch.Tensor,
        cur: int,
        free: list[int],
        newcomers: list[tuple[int, list[int]]],
        upcoming: Sequence[Sequence[int]],
        batch: int,
    ) -> list[int]:
        """Run the newcomers' prompts, write their keys and values into the free rows; their first tokens."""
        prompts = [p for _, p in newcomers]
        prefix = self.prefix_for(prompts, upcoming)
        width = max(len(p) for p in prompts)
        if prefix is not None:
            ids, pass_mask = prefix.layout(prompts, 0)
            past = copy.deepcopy(prefix.cache)
            past.batch_repeat_interleave(len(prompts))
            shared = len(prefix.prefix)
            width = ids.shape[1]
            inputs = ids[:, shared:]
        else:
            ids = torch.zeros((len(prompts), width), dtype=torch.long)
            pass_mask = torch.zeros((len(prompts), width), dtype=torch.long)
            for b, prompt in enumerate(prompts):
                ids[b, width - len(prompt) :] = torch.tensor(prompt)
                pass_mask[b, width - len(prompt) :] = 1
            ids, pass_mask = ids.to(self.device), pass_mask.to(self.device)
            past, shared, inputs = transformers.DynamicCache(), 0, ids
        positions = (pass_mask.cumsum(-1) - 1).clamp(min=0)[:, shared:]
        out = self.model(
            input_ids=inputs,
            attention_mask=pass_mask,
            position_ids=positions,
            use_cache=True,
            **self.keep,
            **{self.cache_arg: past},
        )
        past = out[self.cache_arg]
        for index, layer in enumerate(cache.layers):
            keys, values = past.layers[index].keys, past.layers[index].values
            if not getattr(layer, "is_initialized", False):
                shape = (batch, keys.shape[1], 1)
                layer.lazy_initialization(
                    keys.new_zeros(*shape, keys.shape[-1]), values.new_zeros(*shape, values.shape[-1])
                )
            for b, (slot, prompt) in enumerate(zip(free, prompts, strict=False)):
                own = len(prompt) - shared
                start = cur - len(prompt)
                layer.keys[slot, :, start : start + shared] = keys[b, :, :shared]
                layer.values[slot, :, start : start + shared] = values[b, :, :shared]
                layer.keys[slot, :, cur - own : cur] = keys[b, :, width - own : width]
                layer.values[slot, :, cur - own : cur] = values[b, :, width - own : width]
        for slot, prompt in zip(free, prompts, strict=False):
            mask[slot] = 0
            mask[slot, cur - len(prompt) : cur] = 1
        return [int(t) for t in out.logits[:, -1].argmax(-1).tolist()]


class _Batch:
    """The rows of a refilling batch over one static cache, and the mask of what each row holds."""

    def __init__(self, config: Any, size: int, capacity: int, cur: int, device: torch.device) -> None:
        self.config = config
        self.capacity = capacity
        self.cache: Any = transformers.StaticCache(config=config, max_cache_len=capacity)
        self.mask = torch.zeros((size, capacity), dtype=torch.long, device=device)
        self.last = torch.zeros(size, dtype=torch.long, device=device)
        self.rows: list[_Row | None] = [None] * size
        self.cur = cur  # the column the next decode step writes, for every row

    def span(self) -> int:
        return max((r.length for r in self.rows if r is not None), default=0)

    def move_to(self, new_cur: int) -> None:
        """Move the columns the rows occupy (ending at `cur`) to end at `new_cur`."""
        span, cur = self.span(), self.cur
        if span and new_cur != cur and getattr(self.cache.layers[0], "is_initialized", False):
            for layer in self.cache.layers:
                layer.keys[:, :, new_cur - span : new_cur] = layer.keys[:, :, cur - span : cur].clone()
                layer.values[:, :, new_cur - span : new_cur] = layer.values[:, :, cur - span : cur].clone()
        moved = self.mask[:, cur - span : cur].clone()
        self.mask.zero_()
        self.mask[:, new_cur - span : new_cur] = moved
        self.cur = new_cur

    def keep_running_rows(self) -> bool:
        """With nothing left to admit, keep only the rows still running; False when none is."""
        live = [s for s, r in enumerate(self.rows) if r is not None]
        if live and len(live) < len(self.rows):
            keep = torch.tensor(live, device=self.mask.device)
            smaller: Any = transformers.StaticCache(config=self.config, max_cache_len=self.capacity)
            for old, new in zip(self.cache.layers, smaller.layers, strict=False):
                new.lazy_initialization(old.keys[keep][:, :, :1], old.values[keep][:, :, :1])
                new.keys.copy_(old.keys.index_select(0, keep))
                new.values.copy_(old.values.index_select(0, keep))
            self.cache, self.mask, self.last = smaller, self.mask.index_select(0, keep), self.last.index_select(0, keep)
            self.rows = [self.rows[s] for s in live]
        return bool(live)
