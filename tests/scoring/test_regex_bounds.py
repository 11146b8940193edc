"""A task file's regex stops within its time bound: `(a+)+$` backtracks 2**40 steps on 40 `a`s
and a `b`, which took hours; now it is one sentence naming the pattern, never the response.
Normal patterns keep Python `re`'s results (test_filters compares every filter with lm-eval's)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from assay.errors import UserError
from assay.runner.models.instance import GenerationRequest, Instance
from assay.runner.scoring import filters, metrics
from assay.runner.scoring.bounded_regex import REGEX_SECONDS, RegexTooSlow

CATASTROPHIC = r"(a+)+$"
RESPONSE = "a" * 40 + "b"
SENTENCE = f"The regex '(a+)+$' ran past {REGEX_SECONDS:g} s on one text"


def _within_bound(call: Any) -> str:
    started = time.monotonic()
    with pytest.raises(UserError) as error:
        call()
    assert time.monotonic() - started < 60  # the bound is REGEX_SECONDS; a loaded machine gets room
    assert isinstance(error.value, RegexTooSlow) and RESPONSE not in str(error.value)
    return str(error.value)


def test_a_catastrophic_regex_filter_stops_and_names_task_filter_and_pattern() -> None:
    step = filters.build_filter_ensemble("strict", [{"function": "regex", "regex_pattern": CATASTROPHIC}])
    instance = Instance("generate_until", GenerationRequest("Q", {}), {"q": 1}, 0, 0, "tenant_task", resps=[RESPONSE])
    message = _within_bound(lambda: step.apply([instance]))
    assert message.startswith(f"Task 'tenant_task', filter 'strict': {SENTENCE}")
    assert message.endswith("rewrite it so that each character can be matched one way only.")


def test_multi_choice_patterns_and_ignored_regexes_are_bounded() -> None:
    main = filters.MultiChoiceRegexFilter(regex_pattern=CATASTROPHIC)
    assert SENTENCE in _within_bound(lambda: main.apply([[RESPONSE]], [{"choices": ["x", "y"]}]))
    ignoring = filters.MultiChoiceRegexFilter(regex_pattern=r"\(([A-D])\)", regexes_to_ignore=[CATASTROPHIC])
    assert SENTENCE in _within_bound(lambda: ignoring.apply([[RESPONSE]], [{"choices": ["x", "y"]}]))


def test_exact_matchs_ignored_regexes_are_bounded() -> None:
    call = lambda: metrics.exact_match(references=["a"], predictions=[RESPONSE], regexes_to_ignore=[CATASTROPHIC])  # noqa: E731
    assert SENTENCE in _within_bound(call)


def test_a_normal_pattern_gives_re_s_answer_under_the_bound() -> None:
    step = filters.RegexFilter(regex_pattern=r"(a+)+b")  # nested, but it matches: no backtracking storm
    assert step.apply([[RESPONSE, "no match"]], [{}]) == [["a" * 40, "[invalid]"]]
    assert metrics.exact_match(references=["x"], predictions=["x!!"], regexes_to_ignore=["!+"]) == {"exact_match": 1.0}
