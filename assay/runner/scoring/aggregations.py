"""Aggregations: a task's per-document metric values → the one number in the results.

Each keeps lm-eval 0.4.13's name and arithmetic, down to the summation order (Python's
`sum`, not numpy's pairwise sum, where lm-eval uses `sum`), because results must match to
the last digit. Corpus-level scores (f1, mcc, bleu, chrF, TER) are computed here over all
items, which is why their metrics are pass-throughs; sklearn and sacrebleu are imported
only when such a metric is used.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from assay.extras import needs_extra
from assay.runner.registry import Registry

Aggregation = Callable[[Sequence[Any]], Any]

AGGREGATIONS: Registry[Aggregation] = Registry("aggregation")


@AGGREGATIONS.register("bypass")
def bypass(items: Sequence[Any]) -> int:
    """`--predict_only`: a placeholder value, as lm-eval."""
    return 999


@AGGREGATIONS.register("mean")
def mean(items: Sequence[Any]) -> Any:
    return sum(items) / len(items)


@AGGREGATIONS.register("median")
def median(items: Sequence[Any]) -> Any:
    """The upper median for even counts (no averaging of the two middle values)."""
    return sorted(items)[len(items) // 2]


@AGGREGATIONS.register("nanmean")
def nanmean(items: Sequence[Any]) -> Any:
    if len(items) == 0 or all(np.isnan(items)):
        return np.nan
    return np.nanmean(items)


@AGGREGATIONS.register("perplexity")
def perplexity(items: Sequence[float]) -> float:
    """exp of the negative mean log-likelihood (loglikelihood tasks such as lambada)."""
    return math.exp(-mean(items))


def weighted_mean(items: Sequence[tuple[float, float]]) -> float:
    """Σ value / Σ weight over (value, weight) pairs."""
    values, weights = zip(*items, strict=False)
    mean: float = sum(values) / sum(weights)
    return mean


@AGGREGATIONS.register("weighted_perplexity")
def weighted_perplexity(items: Sequence[tuple[float, float]]) -> float:
    """Word or byte perplexity from (log-likelihood, count) pairs."""
    return math.exp(-weighted_mean(items))


@AGGREGATIONS.register("bits_per_byte")
def bits_per_byte(items: Sequence[tuple[float, float]]) -> float:
    return -weighted_mean(items) / math.log(2)


def _golds_preds(items: Sequence[tuple[Any, Any]]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    columns = list(zip(*items, strict=False))
    return columns[0], columns[1]


def _metrics_package(module: str, metric: str) -> Any:
    """sacrebleu or sklearn.metrics, imported when `metric` is scored: the `metrics` extra installs them."""
    import importlib

    with needs_extra(f"The {metric} metric", "metrics", "sacrebleu", "sklearn"):
        return importlib.import_module(module)


@AGGREGATIONS.register("f1")
def f1(items: Sequence[tuple[Any, Any]]) -> Any:
    """Binary F1 (positive label 1) of (gold, pred) pairs, by sklearn as lm-eval."""
    f1_score = _metrics_package("sklearn.metrics", "f1").f1_score
    golds, preds = _golds_preds(items)
    return np.max(f1_score(golds, preds))


@AGGREGATIONS.register("matthews_corrcoef")
def matthews_corrcoef(items: Sequence[tuple[Any, Any]]) -> Any:
    """Matthews correlation of (gold, pred) pairs (the `mcc` metric's aggregation)."""
    mcc = _metrics_package("sklearn.metrics", "mcc").matthews_corrcoef
    golds, preds = _golds_preds(items)
    return mcc(golds, preds)


def is_non_str_iterable(obj: Any) -> bool:
    return isinstance(obj, Iterable) and not isinstance(obj, str)


def sacrebleu_inputs(items: Sequence[tuple[Any, Any]]) -> tuple[list[tuple[str, ...]], list[str]]:
    """(ref, pred) items → (reference streams, hypotheses), the shapes sacrebleu wants.

    A reference may be one string or a list of them; sacrebleu wants M streams of N
    references. lm-eval decides both shapes from the first item only (a quirk kept here):
    if the first prediction is a one-element list, every prediction is indexed with [0].
    """
    refs: list[Any] = [item[0] for item in items]
    preds: list[Any] = [item[1] for item in items]
    if not is_non_str_iterable(refs[0]):
        refs = [[ref] for ref in refs]
    streams = list(zip(*refs, strict=False))
    if is_non_str_iterable(preds[0]):
        if len(preds[0]) != 1:
            raise ValueError(f"Pred must be a str, was {preds[0]}")
        preds = [pred[0] for pred in preds]
    return streams, preds


@AGGREGATIONS.register("bleu")
def bleu(items: Sequence[tuple[Any, Any]]) -> float:
    """Corpus BLEU (sacrebleu defaults) of (ref, pred) items."""
    sacrebleu = _metrics_package("sacrebleu", "bleu")
    refs, preds = sacrebleu_inputs(items)
    return float(sacrebleu.corpus_bleu(preds, refs).score)


@AGGREGATIONS.register("chrf")
def chrf(items: Sequence[tuple[Any, Any]]) -> float:
    """Corpus chrF (char_order 6, word_order 0, beta 2)."""
    sacrebleu = _metrics_package("sacrebleu", "chrf")
    refs, preds = sacrebleu_inputs(items)
    return float(sacrebleu.corpus_chrf(preds, refs).score)


@AGGREGATIONS.register("chrf++")
def chrf_plus_plus(items: Sequence[tuple[Any, Any]]) -> float:
    """Corpus chrF++ (chrF with word bigrams: word_order 2)."""
    sacrebleu = _metrics_package("sacrebleu", "chrf++")
    refs, preds = sacrebleu_inputs(items)
    return float(sacrebleu.corpus_chrf(preds, refs, word_order=2).score)


@AGGREGATIONS.register("ter")
def ter(items: Sequence[tuple[Any, Any]]) -> float:
    """Corpus translation error rate (lower is better)."""
    sacrebleu = _metrics_package("sacrebleu", "ter")
    refs, preds = sacrebleu_inputs(items)
    return float(sacrebleu.corpus_ter(preds, refs).score)


@AGGREGATIONS.register("brier_score")
def brier_score(items: Sequence[tuple[Any, Any]]) -> Any:
    """Mean over documents of Σ (softmax probability − one-hot gold)²."""
    golds, probs = zip(*items, strict=False)
    matrix = np.array(probs)
    n_classes = matrix.shape[1]
    one_hot = np.eye(n_classes)[list(golds)]
    return np.mean(np.sum((matrix - one_hot) ** 2, axis=1))
