"""Metrics, aggregations and standard errors against lm-eval's own functions.

Inputs are realistic (GSM8K-like strings, translation pairs, seeded random
log-likelihoods and labels) and every expected value comes from lm-eval on the same
inputs, compared exactly: results must agree to the last bit.
"""

from __future__ import annotations

import math
import random
import re
import sys
from collections.abc import Callable
from typing import Any

import lm_eval.api.metrics as lm
import numpy as np
import pytest
from lm_eval.api.registry import (
    DEFAULT_METRIC_REGISTRY,
    aggregation_registry,
    get_metric_aggregation,
    is_higher_better,
    metric_registry,
)

from assay.errors import UserError
from assay.runner.scoring import stderr as st
from assay.runner.scoring.aggregations import AGGREGATIONS
from assay.runner.scoring.metrics import DEFAULT_METRICS, METRICS, compute_metric


@pytest.fixture(autouse=True)
def _lm_eval_single_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """lm-eval's bootstrap otherwise starts a pool of cpu_count() processes."""
    monkeypatch.setenv("DISABLE_MULTIPROC", "1")


def same(a: Any, b: Any) -> bool:
    """Bit-for-bit equality of two results (NaN equals NaN)."""
    a, b = float(a), float(b)
    return (math.isnan(a) and math.isnan(b)) or a == b


# -- inputs -------------------------------------------------------------------------------

RNG = np.random.default_rng(20240611)
N = 240
LOGLIKELIHOODS: list[float] = (-RNG.exponential(2.5, N)).tolist()
ACC: list[float] = [float(x) for x in RNG.integers(0, 2, N)]
INTS: list[int] = RNG.integers(0, 30, N).tolist()
WITH_NANS: list[float] = [float("nan") if RNG.random() < 0.25 else float(x) for x in RNG.normal(size=N)]
# multiple_choice process_results gives (int gold, np.int64 argmax) pairs
BINARY_PAIRS: list[tuple[Any, Any]] = [(int(g), np.int64(p)) for g, p in RNG.integers(0, 2, (N, 2))]
FOUR_WAY_PAIRS: list[tuple[Any, Any]] = [(int(g), np.int64(p)) for g, p in RNG.integers(0, 4, (N, 2))]
ROLLING: list[tuple[float, int]] = [(float(-RNG.exponential(400)), int(RNG.integers(50, 900))) for _ in range(40)]
BRIER: list[tuple[int, np.ndarray]] = [
    (int(RNG.integers(0, 4)), np.exp(z) / np.exp(z).sum()) for z in RNG.normal(size=(60, 4))
]

SOURCES = [
    "The cat sat on the mat.",
    "A quick brown fox jumps over the lazy dog.",
    "It is raining in Paris today, said the forecaster.",
    "Prices rose by 3.5% in March, the highest since 2008.",
    "She bought apples, pears and two kilos of oranges.",
    "Translation quality is hard to measure automatically.",
]
TRANSLATION_PAIRS: list[tuple[Any, Any]] = []
for i, sentence in enumerate(SOURCES * 4):
    words = sentence.split()
    hypothesis = " ".join(words[: len(words) - i % 3]) if i % 4 else sentence.lower()
    TRANSLATION_PAIRS.append((sentence, hypothesis))
MULTI_REF_PAIRS: list[tuple[Any, Any]] = [([ref, ref.upper()], [hyp]) for ref, hyp in TRANSLATION_PAIRS]


# -- registries ------------------------------------------------------------------------------


def test_metric_registry_matches_lm_eval() -> None:
    assert set(METRICS.names()) == set(metric_registry.keys())
    for name in METRICS:
        spec = METRICS.get(name)
        assert spec.name == name
        assert AGGREGATIONS.get(spec.aggregation) is not None
        assert get_metric_aggregation(name) is aggregation_registry.get(spec.aggregation), name
        assert spec.higher_is_better == is_higher_better(name), name


def test_aggregation_registry_matches_lm_eval() -> None:
    assert set(AGGREGATIONS.names()) == set(aggregation_registry.keys())


def test_default_metrics_match_lm_eval() -> None:
    assert {k: list(v) for k, v in DEFAULT_METRICS.items()} == DEFAULT_METRIC_REGISTRY


def test_unknown_names_are_user_errors() -> None:
    with pytest.raises(UserError, match="Did you mean exact_match"):
        METRICS.get("exact_mach")
    with pytest.raises(UserError, match="Did you mean"):
        st.stderr_for("medain", [1.0, 2.0], 100)


# -- exact_match and compute_metric ----------------------------------------------------------

GSM8K_REFS = ["72", "#### 14,400", "-3.5", "Natalia sold 48 clips.\n#### 72", "$1,200.", "18"]
GSM8K_PREDS = ["72", "14400", "-3.5.", "#### 72", "1200", "[invalid]"]


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        # gsm8k's exact_match options
        {"ignore_case": True, "ignore_punctuation": False, "regexes_to_ignore": [",", "\\$", "(?s).*#### ", "\\.$"]},
        {"ignore_case": True, "ignore_punctuation": True},
        {"ignore_numbers": True},
        {"regexes_to_ignore": []},
        {"regexes_to_ignore": [], "ignore_case": True},
        {"regexes_to_ignore": ["\\s+"], "ignore_punctuation": True, "ignore_numbers": True},
    ],
)
def test_exact_match_per_sample_matches_lm_eval(kwargs: dict[str, Any]) -> None:
    for ref in GSM8K_REFS:
        for pred in GSM8K_PREDS + ["Ünïcödé A", "a\x00"]:
            ours = compute_metric("exact_match", [ref], [pred], **kwargs)
            theirs = lm.exact_match_fn(references=[ref], predictions=[pred], **kwargs)
            assert ours.keys() == theirs.keys() == {"exact_match"}
            assert same(ours["exact_match"], theirs["exact_match"]), (ref, pred, kwargs)


@pytest.mark.parametrize("kwargs", [{}, {"regexes_to_ignore": []}, {"ignore_case": True}])
def test_exact_match_multiple_targets_matches_lm_eval(kwargs: dict[str, Any]) -> None:
    # process_results with several golds repeats the prediction once per gold
    golds = ["Paris", "paris", "PARIS, France"]
    for pred in ["paris", "Paris", "Rome"]:
        ours = compute_metric("exact_match", golds, [pred] * len(golds), **kwargs)
        theirs = lm.exact_match_fn(references=golds, predictions=[pred] * len(golds), **kwargs)
        assert same(ours["exact_match"], theirs["exact_match"])


def lm_eval_generate_until_call(fn: Callable[..., Any], gold: Any, result: Any, **kwargs: Any) -> Any:
    """The call lm-eval's process_results makes for one generate_until metric."""
    try:
        return fn(references=[gold], predictions=[result], **kwargs)
    except TypeError:
        return fn([gold, result])


@pytest.mark.parametrize("name", ["bleu", "chrf", "chrf++", "ter", "bypass"])
def test_passthrough_generation_metrics_match_lm_eval(name: str) -> None:
    ref, pred = TRANSLATION_PAIRS[1]
    ours = compute_metric(name, [ref], [pred])
    assert ours == lm_eval_generate_until_call(metric_registry.get(name), ref, pred)


def test_compute_metric_accepts_callables() -> None:
    def length_ratio(references: list[str], predictions: list[str]) -> dict[str, float]:
        return {"ratio": len(predictions[0]) / len(references[0])}

    def pair_only(items: list[str]) -> int:
        return len(items[0]) - len(items[1])

    for fn in (length_ratio, pair_only):
        assert compute_metric(fn, ["abcd"], ["ab"]) == lm_eval_generate_until_call(fn, "abcd", "ab")


def test_passthrough_metrics_return_their_item() -> None:
    for name in METRICS:
        if name not in {"exact_match", "acc_all"}:
            item = (-1.25, 7)
            assert METRICS.get(name).fn(item) == metric_registry.get(name)(item), name


# -- acc_all (MultiRC) ---------------------------------------------------------------------


def multirc_items() -> list[tuple[bool, dict[str, Any]]]:
    rng = random.Random(3)
    items = []
    for paragraph in range(6):
        for question in range(3):
            for _answer in range(rng.randint(1, 4)):
                doc = {"idx": {"paragraph": paragraph, "question": question}, "label": rng.randint(0, 1)}
                items.append((rng.random() < 0.7, doc))
    return items


def test_acc_all_and_its_stderr_match_lm_eval() -> None:
    items = multirc_items()
    assert same(METRICS.get("acc_all").fn(items), lm.acc_all(items))
    ours = st.stderr_for(METRICS.get("acc_all").fn, items, 1000)
    assert ours is not None and same(ours, lm.stderr_for_metric(lm.acc_all, 1000)(items))


# -- aggregations ------------------------------------------------------------------------------

AGGREGATION_INPUTS: list[tuple[str, list[Any]]] = [
    ("mean", ACC),
    ("mean", LOGLIKELIHOODS),
    ("median", LOGLIKELIHOODS),
    ("median", INTS),
    ("nanmean", WITH_NANS),
    ("nanmean", [float("nan")] * 3),
    ("perplexity", LOGLIKELIHOODS),
    ("weighted_perplexity", ROLLING),
    ("bits_per_byte", ROLLING),
    ("f1", BINARY_PAIRS),
    ("matthews_corrcoef", BINARY_PAIRS),
    ("matthews_corrcoef", FOUR_WAY_PAIRS),
    ("bleu", TRANSLATION_PAIRS),
    ("bleu", MULTI_REF_PAIRS),
    ("chrf", TRANSLATION_PAIRS),
    ("chrf++", MULTI_REF_PAIRS),
    ("ter", TRANSLATION_PAIRS),
    ("brier_score", BRIER),
    ("bypass", ACC),
]


@pytest.mark.parametrize(
    ("name", "items"), AGGREGATION_INPUTS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(AGGREGATION_INPUTS)]
)
def test_aggregation_matches_lm_eval(name: str, items: list[Any]) -> None:
    ours = AGGREGATIONS.get(name)(items)
    theirs = aggregation_registry.get(name)(items)
    assert same(ours, theirs), (ours, theirs)


def test_every_aggregation_is_exercised() -> None:
    assert {name for name, _ in AGGREGATION_INPUTS} == set(AGGREGATIONS.names())


# -- stderr ------------------------------------------------------------------------------------


def lm_eval_stderr(metric: str, aggregation: str, items: list[Any], iters: int) -> float | None:
    """What lm-eval's _compute_task_aggregations writes, None for "N/A"."""
    capped = min(iters, 100) if metric in ["bleu", "chrf", "chrf++", "ter"] else iters
    fn = lm.stderr_for_metric(aggregation_registry.get(aggregation), capped) if iters > 0 else None
    return fn(items) if (fn and len(items) > 1) else None


BOOTSTRAP_CASES: list[tuple[str, list[Any], int]] = [
    ("perplexity", LOGLIKELIHOODS, 2500),  # 2 chunks; the last 500 dropped as in lm-eval
    ("median", LOGLIKELIHOODS, 1000),
    ("median", INTS, 1500),
    ("nanmean", WITH_NANS, 2000),
    ("nanmean", [float("nan"), 1.0, float("nan")], 300),  # some resamples are all NaN
    ("f1", BINARY_PAIRS, 300),  # lm-eval calls sklearn per replicate: keep it short
    ("matthews_corrcoef", BINARY_PAIRS, 250),
    ("matthews_corrcoef", FOUR_WAY_PAIRS, 250),
]


@pytest.mark.parametrize(
    ("name", "items", "iters"), BOOTSTRAP_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(BOOTSTRAP_CASES)]
)
def test_bootstrap_stderr_is_bit_exact(name: str, items: list[Any], iters: int) -> None:
    ours = st.stderr_for(name, items, iters)
    theirs = lm_eval_stderr(name, name, items, iters)
    assert ours is not None and theirs is not None
    assert same(ours, theirs), (ours, theirs)


def test_bootstrap_stderr_many_chunks_is_bit_exact() -> None:
    items = (-np.random.default_rng(5).exponential(1.0, 150)).tolist()
    ours = st.stderr_for("perplexity", items, 12000)
    assert ours is not None and same(ours, lm_eval_stderr("perplexity", "perplexity", items, 12000))


def test_fast_paths_agree_with_the_generic_loop_where_they_apply() -> None:
    # Same inputs through the per-replicate loop (what unsupported inputs use).
    cases = [
        ("median", LOGLIKELIHOODS),
        ("f1", BINARY_PAIRS),
        ("matthews_corrcoef", FOUR_WAY_PAIRS),
        ("bleu", MULTI_REF_PAIRS),
    ]
    for name, items in cases:
        fast = st.bootstrap_stderr(name, items, 200)
        slow = st._sample_stddev(st._slow_replicates(AGGREGATIONS.get(name), items, 0, 200))
        assert same(fast, slow), name


def test_unsupported_inputs_take_the_generic_path() -> None:
    # string labels and non-binary f1 labels are left to sklearn, like lm-eval
    labels = [("yes", "no"), ("no", "no"), ("yes", "yes"), ("no", "yes"), ("yes", "yes")]
    ours = st.stderr_for("matthews_corrcoef", labels, 50)
    assert ours is not None and same(ours, lm_eval_stderr("mcc", "matthews_corrcoef", labels, 50))
    with pytest.raises(ValueError):
        st.stderr_for("f1", FOUR_WAY_PAIRS[:20], 10)
    with pytest.raises(ValueError):
        lm_eval_stderr("f1", "f1", FOUR_WAY_PAIRS[:20], 10)


# the last one mixes reference layouts, so lm-eval's per-resample layout choice varies
MIXED_PAIRS: list[tuple[Any, Any]] = [
    *TRANSLATION_PAIRS[:12],
    *[([r, r.upper()], h) for r, h in TRANSLATION_PAIRS[12:]],
]


@pytest.mark.parametrize("metric", ["bleu", "chrf", "chrf++", "ter"])
@pytest.mark.parametrize(
    "items", [TRANSLATION_PAIRS, MULTI_REF_PAIRS, MIXED_PAIRS], ids=["one-ref", "two-refs", "mixed"]
)
def test_corpus_metric_bootstrap_is_capped_and_bit_exact(metric: str, items: list[Any]) -> None:
    try:
        theirs = lm_eval_stderr(metric, metric, items, 100000)
    except Exception as err:  # lm-eval fails on some layouts: so must we, alike
        with pytest.raises(type(err)):
            st.stderr_for(metric, items, 100000, metric=metric)
        return
    ours = st.stderr_for(metric, items, 100000, metric=metric)
    assert ours is not None and theirs is not None and same(ours, theirs)


def test_cap_follows_the_metric_name_not_the_aggregation() -> None:
    # lm-eval caps by metric name: a "bleu" metric aggregated by median is capped too.
    ours = st.stderr_for("median", LOGLIKELIHOODS, 1000, metric="bleu")
    assert ours is not None and same(ours, lm_eval_stderr("bleu", "median", LOGLIKELIHOODS, 1000))
    assert not same(ours, st.stderr_for("median", LOGLIKELIHOODS, 1000))


@pytest.mark.parametrize("items", [ACC, LOGLIKELIHOODS, INTS, [True, False, True]])
def test_mean_stderr_is_closed_form_and_exact(items: list[Any]) -> None:
    ours = st.stderr_for("mean", items, 100000)
    assert ours is not None and same(ours, lm_eval_stderr("acc", "mean", items, 100000))


@pytest.mark.parametrize(
    ("aggregation", "items", "iters"),
    [
        ("mean", ACC, 0),
        ("mean", ACC, -1),
        ("mean", ACC[:1], 1000),
        ("median", LOGLIKELIHOODS[:1], 1000),
        ("weighted_perplexity", ROLLING, 1000),
        ("bits_per_byte", ROLLING, 1000),
        ("brier_score", BRIER, 1000),
        ("bypass", ACC, 1000),
    ],
)
def test_no_stderr_where_lm_eval_writes_na(aggregation: str, items: list[Any], iters: int) -> None:
    assert lm_eval_stderr(aggregation, aggregation, items, iters) is None
    assert st.stderr_for(aggregation, items, iters) is None


def test_custom_aggregation_callables_have_no_stderr_but_registered_ones_do() -> None:
    assert st.stderr_for(lambda xs: max(xs), ACC, 1000) is None
    by_function = st.stderr_for(AGGREGATIONS.get("mean"), ACC, 1000)
    assert by_function is not None and same(by_function, st.stderr_for("mean", ACC, 1000))


# -- groups ----------------------------------------------------------------------------------


def test_group_value_and_stderr_match_lm_eval() -> None:
    rng = random.Random(11)
    sizes = [rng.randint(50, 3000) for _ in range(57)]  # mmlu-like subtask sizes
    values = [rng.random() for _ in sizes]
    stderrs = [rng.random() / 20 for _ in sizes]
    for weight_by_size in (True, False):
        assert same(
            st.aggregate_group_metric(values, sizes, weight_by_size=weight_by_size),
            lm.aggregate_subtask_metrics(values, sizes, weight_by_size),
        )
    assert same(st.pooled_group_stderr(stderrs, sizes), lm.pooled_sample_stderr(stderrs, sizes))
    assert same(st.group_stderr(stderrs, sizes, weight_by_size=True), lm.pooled_sample_stderr(stderrs, sizes))
    assert same(st.group_stderr(stderrs, sizes, weight_by_size=False), lm.unweighted_mean_stderr(stderrs))
    assert st.group_stderr([*stderrs[:-1], None], sizes, weight_by_size=True) is None


def test_pooled_group_stderr_approximates_stderr_of_all_items() -> None:
    # The property lm-eval relies on: pooling subtask stderrs ≈ one stderr over all items.
    rng = random.Random(2)
    tasks = [[float(rng.random() < p) for _ in range(n)] for p, n in [(0.3, 400), (0.6, 900), (0.8, 250)]]
    stderrs = [st.mean_stderr(items) for items in tasks]
    pooled = st.pooled_group_stderr(stderrs, [len(items) for items in tasks])
    overall = st.mean_stderr([x for items in tasks for x in items])
    assert abs(pooled - overall) / overall < 0.15


@pytest.mark.parametrize(("module", "metric"), [("sacrebleu", "bleu"), ("sklearn", "f1")])
def test_a_metric_without_its_package_names_the_metrics_extra(
    module: str, metric: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from assay.runner.scoring.aggregations import AGGREGATIONS

    for name in (module, f"{module}.metrics"):
        monkeypatch.setitem(sys.modules, name, None)  # `import` of it raises ModuleNotFoundError
    from assay.extras import install_command

    sentence = f"The {metric} metric needs the 'metrics' extra: {install_command('metrics')}."
    with pytest.raises(UserError, match=f"^{re.escape(sentence)}$"):
        AGGREGATIONS.get(metric)([("a b", "a b"), ("c d", "c d")] if metric == "bleu" else [(1, 1), (0, 1)])


def test_a_missing_module_of_no_extra_keeps_its_traceback() -> None:
    from assay.extras import needs_extra

    with pytest.raises(ModuleNotFoundError), needs_extra("x", "y", "sacrebleu"):
        import assay_no_such_module  # noqa: F401
