"""The comparison's corpus aggregations give the engine's (lm-eval's) numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from assay.compare import corpus
from assay.runner.scoring.aggregations import AGGREGATIONS

RNG = np.random.default_rng(11)
LOGLIKS = list(-RNG.random(40) * 5)
WEIGHTED = [[ll, int(w)] for ll, w in zip(LOGLIKS, RNG.integers(1, 30, 40), strict=False)]
BINARY = [[int(g), int(p)] for g, p in zip(RNG.integers(0, 2, 40), RNG.integers(0, 2, 40), strict=False)]
MULTICLASS = [[int(g), int(p)] for g, p in zip(RNG.integers(0, 4, 40), RNG.integers(0, 4, 40), strict=False)]
SENTENCES = [
    ["the cat sat on the mat", "the cat sat on a mat"],
    ["a quick brown fox", "the quick brown fox"],
    ["hello world", "hello there world"],
    [["one ref", "two ref"], ["one ref"]],
]


@pytest.mark.parametrize(
    ("name", "items"),
    [
        ("perplexity", LOGLIKS),
        ("weighted_perplexity", WEIGHTED),
        ("bits_per_byte", WEIGHTED),
        ("median", LOGLIKS),
        ("nanmean", LOGLIKS + [math.nan]),
        ("f1", BINARY),
        ("matthews_corrcoef", BINARY),
        ("matthews_corrcoef", MULTICLASS),
        ("bleu", SENTENCES[:3]),
        ("chrf", SENTENCES[:3]),
        ("chrf++", SENTENCES[:3]),
        ("ter", SENTENCES[:3]),
    ],
)
def test_each_corpus_aggregation_matches_the_engine(name: str, items: list) -> None:
    aggregate, prepare = corpus.CORPUS[name]
    assert aggregate(prepare(items)) == pytest.approx(float(AGGREGATIONS.get(name)(items)), rel=1e-12)


def test_brier_score_is_the_mean_of_its_per_document_values() -> None:
    items = [(int(g), list(p / p.sum())) for g, p in zip(RNG.integers(0, 4, 30), RNG.random((30, 4)), strict=False)]
    per_document = [corpus.brier_per_document(item) for item in items]
    assert np.mean(per_document) == pytest.approx(float(AGGREGATIONS.get("brier_score")(items)))


def test_aggregation_comes_from_the_task_config_else_lm_evals_default() -> None:
    assert corpus.aggregation_of("word_perplexity", None) == "weighted_perplexity"
    assert corpus.aggregation_of("acc", None) == "mean"
    assert corpus.aggregation_of("acc", "median") == "median"
