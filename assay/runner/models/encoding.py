"""Text → token ids exactly as lm-eval's HFLM produces them (LMEVAL_FACTS §6).

Shared by the `hf` and `vllm` backends (lm-eval's VLLM tokenises with HFLM's rules too), as
is what the results report of their tokenizer (`tokenizer_info`).

Scores depend on token boundaries, so these rules are reproduced on purpose, quirks included:
trailing context whitespace moves to the continuation; a causal pair is split by encoding
the whole text and cutting at the context's length; an empty context becomes the prefix
token; a text that already starts with the BOS string is encoded without special tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from assay.runner.models.token_pairs import TokenPair

if TYPE_CHECKING:  # only annotations: the vllm backend's module imports this without torch
    import torch


class Encoder:
    """Tokenisation rules bound to one tokenizer and the model_args that change them."""

    def __init__(
        self, tokenizer: Any, *, backend: str, add_bos_token: bool | None, prefix_token_id: int | None
    ) -> None:
        self.tokenizer = tokenizer
        self.backend = backend
        self.add_bos_token = add_bos_token
        self._custom_prefix = prefix_token_id
        self._prefix_text = tokenizer.decode(self.prefix_token_id)

    @property
    def prefix_token_id(self) -> int:
        """Stands in for an empty context: the custom id, else BOS, else EOS."""
        if self._custom_prefix is not None:
            return self._custom_prefix
        if self.tokenizer.bos_token_id is not None:
            return int(self.tokenizer.bos_token_id)
        return int(self.tokenizer.eos_token_id)

    def _special_kwargs(self, text: str, add_special_tokens: bool | None) -> dict[str, bool]:
        if add_special_tokens is not None:
            return {"add_special_tokens": add_special_tokens}
        # lm-eval: a string that already begins with the prefix token's text gets no BOS
        if text.startswith(self._prefix_text):
            return {"add_special_tokens": False}
        if self.add_bos_token is not None:
            return {"add_special_tokens": self.add_bos_token}
        return {}

    def encode(self, text: str, add_special_tokens: bool | None = None) -> list[int]:
        """lm-eval's `tok_encode` (None = the tokenizer's own default, or add_bos_token)."""
        return list(self.tokenizer.encode(text, **self._special_kwargs(text, add_special_tokens)))

    def encode_many(self, texts: Sequence[str], add_special_tokens: bool | None = None) -> list[list[int]]:
        """`encode` for many texts, in one batched tokenizer call per kwargs variant.

        Each distinct text is encoded once: a multiple-choice document's context comes once
        per choice, and a 5-shot context is most of the tokenizer's work."""
        distinct = list(dict.fromkeys(texts))
        encoded: dict[str, list[int]] = {}
        by_kwargs: dict[tuple[tuple[str, bool], ...], list[str]] = {}
        for text in distinct:
            key = tuple(sorted(self._special_kwargs(text, add_special_tokens).items()))
            by_kwargs.setdefault(key, []).append(text)
        for key, group in by_kwargs.items():
            ids = self.tokenizer(group, **dict(key))["input_ids"]
            for text, row in zip(group, ids, strict=False):
                encoded[text] = list(row)
        return [list(encoded[text]) for text in texts]

    def encode_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[TokenPair]:
        """lm-eval's `_encode_pair` for each (context, continuation), with the empty-context rule."""
        plan: list[tuple[str, str, str]] = []  # (kind, context, continuation) after whitespace moves
        for context, continuation in pairs:
            if context == "":
                plan.append(("empty", "", continuation))
                continue
            stripped = context.rstrip()
            moved = context[len(stripped) :]
            plan.append(("pair", stripped, moved + continuation))
        empties = [cont for kind, _, cont in plan if kind == "empty"]
        contexts = [ctx for kind, ctx, _ in plan if kind == "pair"]
        if self.backend == "causal":
            wholes = self.encode_many([ctx + cont for kind, ctx, cont in plan if kind == "pair"])
            conts_alone: list[list[int]] = []
        else:
            wholes = []
            conts_alone = self.encode_many([cont for kind, _, cont in plan if kind == "pair"], add_special_tokens=False)
        ctx_encs = self.encode_many(contexts)
        empty_encs = self.encode_many(empties, add_special_tokens=False)
        result: list[TokenPair] = []
        pair_i = empty_i = 0
        for kind, _, _ in plan:
            if kind == "empty":
                cont_enc = empty_encs[empty_i]
                empty_i += 1
                if cont_enc and cont_enc[0] == self.prefix_token_id:
                    # the continuation already starts with the prefix token: it is the context
                    result.append((cont_enc[:1], cont_enc[1:]))
                else:
                    result.append(([self.prefix_token_id], cont_enc))
                continue
            ctx_enc = ctx_encs[pair_i]
            if self.backend == "causal":
                result.append((ctx_enc, wholes[pair_i][len(ctx_enc) :]))
            else:
                result.append((ctx_enc, conts_alone[pair_i]))
            pair_i += 1
        return result

    def batch_encode_left(
        self, texts: Sequence[str], *, left_truncate_len: int | None, truncation: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-padded ids and attention mask for generation (lm-eval's `tok_batch_encode`).

        The special-token choice looks at the first text only, as lm-eval does.
        """
        kwargs: dict[str, bool] = {}
        if self.backend == "causal":
            bos = getattr(self.tokenizer, "bos_token", None)
            if bos is not None and texts[0].startswith(bos):
                kwargs = {"add_special_tokens": False}
            elif self.add_bos_token is not None:
                kwargs = {"add_special_tokens": self.add_bos_token}
        saved_side = self.tokenizer.padding_side
        self.tokenizer.padding_side = "left"
        try:
            encoding = self.tokenizer(
                list(texts), truncation=truncation, padding="longest", return_tensors="pt", **kwargs
            )
        finally:
            self.tokenizer.padding_side = saved_side
        ids, mask = encoding["input_ids"], encoding["attention_mask"]
        if left_truncate_len and ids.shape[1] > left_truncate_len:
            ids, mask = ids[:, -left_truncate_len:], mask[:, -left_truncate_len:]
        return ids, mask

    def decode(self, tokens: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        return str(self.tokenizer.decode(list(tokens), skip_special_tokens=skip_special_tokens))


def tokenizer_info(tokenizer: Any, *, eot_token_id: int, max_length: int) -> dict[str, Any]:
    """The results' tokenizer keys for a transformers tokenizer (lm-eval's add_tokenizer_info)."""
    return {
        "tokenizer_pad_token": [tokenizer.pad_token, str(tokenizer.pad_token_id)],
        "tokenizer_eos_token": [tokenizer.eos_token, str(tokenizer.eos_token_id)],
        "tokenizer_bos_token": [tokenizer.bos_token, str(tokenizer.bos_token_id)],
        "eot_token_id": eot_token_id,
        "max_length": max_length,
    }
