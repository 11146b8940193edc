"""The local tokenizer an API backend counts tokens with, as lm-eval's TemplateAPI uses it.

Loglikelihood needs token boundaries (the context length inside the echoed prompt), so
the completions backend tokenizes locally and, by default, sends token ids. lm-eval's API
rule differs from HFLM's: no special tokens unless add_bos_token=True.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from assay.errors import UserError
from assay.extras import needs_extra
from assay.runner.models.api.args import APIArgs


class APITokenizer:
    """huggingface (transformers' AutoTokenizer) or tiktoken, behind one small interface."""

    def __init__(self, args: APIArgs) -> None:
        self.backend = args.tokenizer_backend
        self.add_bos_token = args.add_bos_token
        self._custom_prefix = args.custom_prefix_token_id
        self._eos_string = args.eos_string
        self.name = str(args.tokenizer or args.model or "")
        self.impl: Any = _load(args)

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        if self.backend == "tiktoken":
            return list(self.impl.encode(text))
        special = add_special_tokens or self.add_bos_token
        return list(self.impl(text, add_special_tokens=special, return_attention_mask=False).input_ids)

    def encode_many(self, texts: Sequence[str], *, add_special_tokens: bool = False) -> list[list[int]]:
        if self.backend == "tiktoken":
            return [list(ids) for ids in self.impl.encode_batch(list(texts))]
        special = add_special_tokens or self.add_bos_token
        return [
            list(ids)
            for ids in self.impl(list(texts), add_special_tokens=special, return_attention_mask=False).input_ids
        ]

    def decode_batch(self, rows: Sequence[Sequence[int]]) -> list[str]:
        if self.backend == "tiktoken":
            return [str(text) for text in self.impl.decode_batch([list(r) for r in rows])]
        return [str(text) for text in self.impl.batch_decode([list(r) for r in rows])]

    @property
    def eot_token_id(self) -> int:
        if self.backend == "tiktoken":
            return int(self.impl.eot_token)
        return int(self.impl.eos_token_id)

    @property
    def prefix_token_id(self) -> int:
        """Stands in for an empty context: the custom id, else BOS, else EOS (lm-eval's order)."""
        if self._custom_prefix is not None:
            return int(self._custom_prefix)
        if self.backend == "huggingface" and self.impl.bos_token_id is not None:
            return int(self.impl.bos_token_id)
        return self.eot_token_id

    @property
    def eos_string(self) -> str | None:
        if self._eos_string:
            return self._eos_string
        if self.backend == "tiktoken":
            return str(self.impl.decode([self.impl.eot_token]))
        eos = self.impl.eos_token
        return str(eos) if eos is not None else None


def _load(args: APIArgs) -> Any:
    if args.tokenizer_backend == "tiktoken":
        with needs_extra("tokenizer_backend=tiktoken", "api", "tiktoken"):
            import tiktoken
        try:
            return tiktoken.encoding_for_model(str(args.model))
        except KeyError:
            raise UserError(
                f"tiktoken has no encoding for model {args.model!r}; pass tokenizer_backend=huggingface,tokenizer=<dir>."
            ) from None
    with needs_extra("tokenizer_backend=huggingface", "api", "transformers"):
        import transformers
    name = str(args.tokenizer or args.model)
    try:
        return transformers.AutoTokenizer.from_pretrained(
            name, trust_remote_code=args.trust_remote_code, revision=args.revision, use_fast=args.use_fast_tokenizer
        )
    except (OSError, ValueError) as err:
        raise UserError(
            f"Could not load the tokenizer {name!r} ({str(err).splitlines()[0]}); pass model_args tokenizer=<local dir or hub id>."
        ) from None
