"""Every filter and pipeline against lm-eval's own implementation on the same responses."""

from __future__ import annotations

import copy
from typing import Any

import lm_eval.filters as lm_filters
import pytest
from lm_eval.api.instance import Instance as LmInstance
from lm_eval.api.registry import get_filter as lm_get_filter

from assay.errors import UserError
from assay.runner.models.instance import GenerationRequest, Instance
from assay.runner.scoring import filters

# GSM8K-style generations, with the awkward cases: several answers, "$" and ",", none,
# a trailing period, a negative number, an empty string and a non-string response.
GSM8K_RESPONSES: list[list[Any]] = [
    ["Natalia sold 48/2 = 24 clips in May.\nShe sold 48+24 = 72 clips.\n#### 72"],
    ["He pays $1,200 a month, so $14,400 a year.\n#### $14,400.\n\nQuestion: next"],
    ["The answer is -3.5 degrees, so #### -3.5 and later #### 7"],
    ["I am not sure about this one."],
    [""],
    [None],
    ["First 12, then 15.\nThe total is 27.", "#### 27"],
]
GSM8K_DOCS: list[dict[str, Any]] = [{"question": f"q{i}", "answer": "#### 1"} for i in range(len(GSM8K_RESPONSES))]

MC_DOCS: list[dict[str, Any]] = [
    {"choices": ["Paris", "London", "Paris, Texas", "Rome!"]},
    {"choices": ["Guilty", "Guilty of Romance", "Innocent"]},
    {"choices": ["yes", "no"]},
    {"choices": ["Blue whale", "Elephant", "Giraffe", "Horse"]},
    {"choices": ["1", "2", "3"]},
]
MC_RESPONSES: list[list[Any]] = [
    ["The capital of France is paris, texas.", "(B) London", "Answer: C"],
    ["The film is Guilty of Romance.", "#### 5", "nothing here"],
    ["YES!", "I'd say: B", None],
    ["the ELEPHANT, clearly", "Answer:D", "(A)"],
    ["It must be 3.", "The answer: A", "#### 2"],
]


def lm_apply(name: str, kwargs: dict[str, Any], resps: list[Any], docs: list[dict[str, Any]]) -> list[Any]:
    """lm-eval's filter on deep copies, materialised (some of its filters return iterators)."""
    lm_filter = lm_get_filter(name)(**copy.deepcopy(kwargs))
    return list(lm_filter.apply(copy.deepcopy(resps), copy.deepcopy(docs)))


def assay_apply(name: str, kwargs: dict[str, Any], resps: list[Any], docs: list[dict[str, Any]]) -> list[Any]:
    step = filters.build_filter({"function": name, **copy.deepcopy(kwargs)})
    return step.apply(copy.deepcopy(resps), copy.deepcopy(docs))


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        # gsm8k strict-match and flexible-extract
        {"regex_pattern": "#### (\\-?[0-9\\.\\,]+)"},
        {"regex_pattern": "(-?[$0-9.,]{2,})|(-?[0-9]+)", "group_select": -1},
        {"regex_pattern": "(-?[$0-9.,]{2,})|(-?[0-9]+)", "group_select": 0, "fallback": "NONE"},
        # all-empty groups in a tuple fall back
        {"regex_pattern": "(x)?(y)?clips", "group_select": 0},
        {"regex_pattern": "[0-9]+"},
    ],
)
def test_regex_matches_lm_eval(kwargs: dict[str, Any]) -> None:
    ours = assay_apply("regex", kwargs, GSM8K_RESPONSES, GSM8K_DOCS)
    assert ours == lm_apply("regex", kwargs, GSM8K_RESPONSES, GSM8K_DOCS)


def test_regex_after_take_first_reads_characters_like_lm_eval() -> None:
    resps = [["#### 12"], ["abc 3"]]
    ours = filters.build_filter_ensemble(
        "x", [{"function": "take_first"}, {"function": "regex", "regex_pattern": "[0-9]"}]
    )
    theirs = lm_filters.build_filter_ensemble("x", [("take_first", None), ("regex", {"regex_pattern": "[0-9]"})])
    assert run_ours(ours, resps, [{}, {}]) == run_theirs(theirs, resps, [{}, {}])


@pytest.mark.parametrize("kwargs", [{}, {"fallback": ["NONE"]}, {"regex_pattern": "unused", "group_select": 3}])
def test_regex_pos_matches_lm_eval(kwargs: dict[str, Any]) -> None:
    resps = [
        ["[('The', 'DET'), ('cat', 'NOUN'), ('sat', 'VERB')]", "no tags here"],
        [[("dog", "NOUN"), ("runs", "VERB")], []],
    ]
    docs: list[dict[str, Any]] = [{}, {}]
    assert assay_apply("regex_pos", kwargs, resps, docs) == lm_apply("regex_pos", kwargs, resps, docs)


@pytest.mark.parametrize("name", ["remove_whitespace", "lowercase", "uppercase", "format_span"])
def test_string_transforms_match_lm_eval(name: str) -> None:
    resps = [
        ["  Person: John Smith, Mary\nLocation: Kenya, uganda $$ org: None  ", "\tDATE: 2020\n"],
        ["  people : Ada$$country: France$$", "Ünïcödé ß"],
        ["time: noon, none\ncompany: ACME Corp", ""],
    ]
    docs: list[dict[str, Any]] = [{}, {}, {}]
    assert assay_apply(name, {}, resps, docs) == lm_apply(name, {}, resps, docs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"regex_pattern": r"answer is \(?([A-D])\)?", "ignore_case": True},
        {"regex_pattern": r"#### (\d+)", "ignore_case": True, "ignore_punctuation": True},
        {"regex_pattern": r"(\([A-Z]\))", "regexes_to_ignore": [",", r"\.$"], "fallback": "[none]"},
        {"regex_pattern": r"(A)|(B)", "group_select": -1},
    ],
)
def test_multi_choice_regex_matches_lm_eval(kwargs: dict[str, Any]) -> None:
    strings = [[r for r in inst if isinstance(r, str)] for inst in MC_RESPONSES]
    ours = assay_apply("multi_choice_regex", kwargs, strings, MC_DOCS)
    assert ours == lm_apply("multi_choice_regex", kwargs, strings, MC_DOCS)
    # A None response: lm-eval normalises it before its non-string check, so with any
    # ignore option both fail alike, and without one both give the fallback.
    try:
        expected: Any = lm_apply("multi_choice_regex", kwargs, MC_RESPONSES, MC_DOCS)
    except (TypeError, AttributeError) as err:
        with pytest.raises(type(err)):
            assay_apply("multi_choice_regex", kwargs, MC_RESPONSES, MC_DOCS)
    else:
        assert assay_apply("multi_choice_regex", kwargs, MC_RESPONSES, MC_DOCS) == expected


def test_selection_filters_match_lm_eval() -> None:
    resps = [["b", "a", "b", "c"], ["x", "y", "y", "x"], ["q", "r", "s", "t"]]
    docs: list[dict[str, Any]] = [{}, {}, {}]
    for name, kwargs in [
        ("take_first", {}),
        ("take_first_k", {"k": 2}),
        ("take_first_k", {"k": 4}),
        ("majority_vote", {}),
    ]:
        assert assay_apply(name, kwargs, resps, docs) == lm_apply(name, kwargs, resps, docs), name


def test_take_first_k_needs_enough_repeats() -> None:
    with pytest.raises(UserError, match="repeats"):
        assay_apply("take_first_k", {"k": 3}, [["a", "b"]], [{}])


@pytest.mark.parametrize(
    "kwargs", [{"mapping_dict": {"A": 0, "B": 1}, "default_value": -1}, {}, {"mapping_dict": {"yes": True}}]
)
def test_map_matches_lm_eval(kwargs: dict[str, Any]) -> None:
    resps = [["A", "B", "C"], ["yes", "no"]]
    docs: list[dict[str, Any]] = [{}, {}]
    assert assay_apply("map", kwargs, resps, docs) == lm_apply("map", kwargs, resps, docs)


def test_map_rejects_non_dict() -> None:
    with pytest.raises(UserError):
        filters.build_filter({"function": "map", "mapping_dict": ["A"]})


def test_custom_filter_gets_resps_and_docs() -> None:
    def first_with_doc_id(resps: Any, docs: Any) -> Any:
        return [f"{doc['id']}:{r[0]}" for r, doc in zip(resps, docs, strict=False)]

    resps = [["a"], ["b"]]
    docs = [{"id": 1}, {"id": 2}]
    kwargs = {"filter_fn": first_with_doc_id}
    assert assay_apply("custom", kwargs, resps, docs) == lm_apply("custom", kwargs, resps, docs)


def make_ours(resps: list[list[Any]], docs: list[dict[str, Any]]) -> list[Instance]:
    return [
        Instance(
            request_type="generate_until",
            request=GenerationRequest(context="Q", gen_kwargs={}),
            doc=doc,
            doc_id=i,
            idx=0,
            task_name="t",
            resps=list(copy.deepcopy(r)),
        )
        for i, (r, doc) in enumerate(zip(resps, docs, strict=False))
    ]


def run_ours(ensemble: filters.FilterEnsemble, resps: list[list[Any]], docs: list[dict[str, Any]]) -> list[Any]:
    instances = make_ours(resps, docs)
    ensemble.apply(instances)
    return [inst.filtered_resps[ensemble.name] for inst in instances]


def run_theirs(ensemble: Any, resps: list[list[Any]], docs: list[dict[str, Any]]) -> list[Any]:
    instances = [
        LmInstance("generate_until", doc, ("Q", {}), 0, ("t", i, 1), resps=list(copy.deepcopy(r)))
        for i, (r, doc) in enumerate(zip(resps, docs, strict=False))
    ]
    ensemble.apply(instances)
    return [inst.filtered_resps[ensemble.name] for inst in instances]


GSM8K_PIPELINES: dict[str, list[dict[str, Any]]] = {
    "strict-match": [{"function": "regex", "regex_pattern": "#### (\\-?[0-9\\.\\,]+)"}, {"function": "take_first"}],
    "flexible-extract": [
        {"function": "regex", "group_select": -1, "regex_pattern": "(-?[$0-9.,]{2,})|(-?[0-9]+)"},
        {"function": "take_first"},
    ],
    "maj@3": [
        {"function": "take_first_k", "k": 3},
        {"function": "regex"},
        {"function": "majority_vote"},
        {"function": "take_first"},
    ],
}


@pytest.mark.parametrize("name", sorted(GSM8K_PIPELINES))
def test_ensemble_matches_lm_eval(name: str) -> None:
    steps = GSM8K_PIPELINES[name]
    resps = [r * 3 if len(r) < 3 else r for r in GSM8K_RESPONSES]
    lm_steps = [(s["function"], {k: v for k, v in s.items() if k != "function"}) for s in steps]
    ours = run_ours(filters.build_filter_ensemble(name, steps), resps, GSM8K_DOCS)
    assert ours == run_theirs(lm_filters.build_filter_ensemble(name, lm_steps), resps, GSM8K_DOCS)


def test_default_ensemble_is_none_take_first() -> None:
    resps = [[(-1.5, True)], [(-0.2, False)]]
    docs: list[dict[str, Any]] = [{}, {}]
    ours = filters.default_filter_ensemble()
    assert ours.name == "none"
    theirs = lm_filters.build_filter_ensemble("none", [("take_first", None)])
    assert run_ours(ours, resps, docs) == run_theirs(theirs, resps, docs)


def test_every_lm_eval_filter_is_registered() -> None:
    # decontaminate is a stub in lm-eval (its apply returns None), so it is left out.
    expected = {
        "regex",
        "regex_pos",
        "remove_whitespace",
        "multi_choice_regex",
        "take_first",
        "take_first_k",
        "majority_vote",
        "lowercase",
        "uppercase",
        "map",
        "format_span",
        "custom",
    }
    assert set(filters.FILTERS.names()) == expected


def test_unknown_filter_suggests_close_names() -> None:
    with pytest.raises(UserError, match="Did you mean regex"):
        filters.build_filter_ensemble("x", [{"function": "regexx"}])


def test_bad_filter_arguments_are_user_errors() -> None:
    with pytest.raises(UserError, match="regex"):
        filters.build_filter({"function": "regex", "pattern": "x"})
    with pytest.raises(UserError, match="function"):
        filters.build_filter({"regex_pattern": "x"})
