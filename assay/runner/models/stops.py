"""Where generation stops, as lm-eval decides it for every backend.

A task's generation kwargs bound the output twice: a token budget (`max_gen_toks` or one
of its aliases) and stop strings (`until`, plus the model's EOS text). After generation
the text is cut at each stop string in turn, once a reasoning trace (`think_end_token`) is
dropped. The backends apply these rules the same way; each keeps its own kwargs for the
engine it drives (HF generate, vLLM's SamplingParams, an HTTP payload).
"""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence
from typing import Any

from assay.errors import UserError

#: the token budget's names, in lm-eval's priority: the first one given wins
MAX_TOKEN_ALIASES = ("max_gen_toks", "max_new_tokens", "max_tokens", "max_completion_tokens")


def pop_max_gen_toks(kwargs: MutableMapping[str, Any], default: int) -> int:
    """The token budget, removing every alias from `kwargs` (the engines take their own name)."""
    budgets = [kwargs.pop(name, None) for name in MAX_TOKEN_ALIASES]
    given = [b for b in budgets if b is not None]
    return int(given[0]) if given else default


def until_list(until: Any) -> list[str]:
    """A task's `until` as a list: None is none, a string is one (lm-eval's handle_stop_sequences)."""
    if until is None:
        return []
    if isinstance(until, str):
        return [until]
    if isinstance(until, (list, tuple)):
        return list(until)
    raise UserError(f"generation kwarg until={until!r} must be a string or a list of strings.")


def with_eos(until: Sequence[str], eos: str | None) -> list[str]:
    """`until` plus the EOS text, unless it is there already or there is none."""
    return [*until, eos] if eos is not None and eos not in until else list(until)


def after_thinking(text: str, think_end: str | None) -> str:
    """The text after the last `think_end`, left-stripped; all of it when no think_end is set."""
    return text.split(think_end)[-1].lstrip() if think_end else text


def cut_at_stops(text: str, stops: Sequence[str], think_end: str | None) -> str:
    """Drop the reasoning trace (if any), then cut at each stop string in turn (lm-eval order)."""
    text = after_thinking(text, think_end)
    for stop in stops:
        if stop:
            text = text.split(stop)[0]
    return text
