"""The lm-eval rules several backend families share (models/stops.py, models/token_pairs.py),
checked against lm-eval's own functions."""

from __future__ import annotations

from typing import Any

import pytest
from lm_eval.models.utils import handle_stop_sequences

from assay.errors import UserError
from assay.runner.models import stops
from assay.runner.models.token_pairs import left_truncated


@pytest.mark.parametrize("until", [None, "\n\n", [], ["Q:", "\n"], ["</s>"]])
@pytest.mark.parametrize("eos", [None, "</s>"])
def test_stop_strings_are_lm_eval_s(until: Any, eos: str | None) -> None:
    theirs = handle_stop_sequences(list(until) if isinstance(until, list) else until, eos)
    assert stops.with_eos(stops.until_list(until), eos) == theirs


def test_an_until_that_is_no_string_nor_list_is_a_user_error() -> None:
    with pytest.raises(UserError, match="until=3"):
        stops.until_list(3)


def test_the_budget_takes_lm_eval_s_first_alias_and_removes_every_one() -> None:
    kwargs: dict[str, Any] = {"max_tokens": 5, "max_new_tokens": "7", "temperature": 0}
    assert stops.pop_max_gen_toks(kwargs, 256) == 7 and kwargs == {"temperature": 0}
    assert stops.pop_max_gen_toks({}, 256) == 256


def test_output_is_cut_after_the_reasoning_at_each_stop_in_turn() -> None:
    text = "plan A</think>  answer: 42\n\nQ: next"
    assert stops.cut_at_stops(text, ["\n\n", "Q:", ""], "</think>") == "answer: 42"
    assert stops.cut_at_stops(text, ["\n\n"], None) == "plan A</think>  answer: 42"
    assert stops.after_thinking(" no trace", "</think>") == "no trace"  # lm-eval strips it either way


def test_left_truncation_drops_the_oldest_context_tokens() -> None:
    assert left_truncated(([1, 2, 3], [4, 5]), 10) == ([1, 2, 3, 4, 5], 3)
    assert left_truncated(([1, 2, 3], [4, 5]), 4) == ([2, 3, 4, 5], 2)
