"""How each lm-eval metric turns per-document values into the task's number, for comparing.

A metric aggregated by `mean` (acc, exact_match, ...) is compared document by document.
The others are corpus-level: their per-document value in the samples JSONL is an
ingredient (a log-likelihood, a (log-likelihood, words) pair, a (gold, prediction) pair,
a (reference, hypothesis) pair) and the number comes from all of them at once, so they are
compared by a paired bootstrap over documents that recomputes the aggregation.

The arithmetic is lm-eval 0.4.13's (the engine's copy is assay/runner/scoring/
aggregations.py; tests/compare/test_corpus.py checks that both give the same numbers).
It lives here too because the comparison must not import the engine; the numeric ones work
on numpy arrays so that thousands of bootstrap replicates stay fast. `brier_score` is a
mean of a per-document quantity, so it becomes that quantity and a paired t-test.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from assay.compare.statistics import Aggregate

MEAN = "mean"
DEFAULT_AGGREGATIONS: Mapping[str, str] = {
    "perplexity": "perplexity",
    "word_perplexity": "weighted_perplexity",
    "byte_perplexity": "weighted_perplexity",
    "bits_per_byte": "bits_per_byte",
    "f1": "f1",
    "mcc": "matthews_corrcoef",
    "bleu": "bleu",
    "chrf": "chrf",
    "chrf++": "chrf++",
    "ter": "ter",
    "brier_score": "brier_score",
}
"""lm-eval's registered aggregation of each non-mean metric (every other metric: mean)."""


def perplexity(items: np.ndarray) -> float:
    return math.exp(-float(items.mean()))


def weighted_perplexity(items: np.ndarray) -> float:
    return math.exp(-float(items[:, 0].sum()) / float(items[:, 1].sum()))


def bits_per_byte(items: np.ndarray) -> float:
    return -float(items[:, 0].sum()) / float(items[:, 1].sum()) / math.log(2)


def median(items: np.ndarray) -> float:
    """The upper median, as lm-eval: sorted(items)[n // 2]."""
    return float(np.sort(items)[len(items) // 2])


def nanmean(items: np.ndarray) -> float:
    return math.nan if np.isnan(items).all() else float(np.nanmean(items))


def f1(items: np.ndarray) -> float:
    """Binary F1 with positive label 1 (sklearn's `f1_score`; 0 where undefined)."""
    golds, preds = items[:, 0] == 1, items[:, 1] == 1
    true_pos = int(np.count_nonzero(golds & preds))
    wrong = int(np.count_nonzero(golds != preds))
    return 2 * true_pos / (2 * true_pos + wrong) if true_pos + wrong else 0.0


def matthews_corrcoef(items: np.ndarray) -> float:
    """Multiclass Matthews correlation, sklearn's formula (0 where undefined)."""
    _, codes = np.unique(items, return_inverse=True)
    codes = codes.reshape(items.shape)
    k = int(codes.max()) + 1
    confusion = np.zeros((k, k))
    np.add.at(confusion, (codes[:, 0], codes[:, 1]), 1)
    true_counts, pred_counts = confusion.sum(axis=1), confusion.sum(axis=0)
    n, correct = confusion.sum(), np.trace(confusion)
    covariance = correct * n - float(pred_counts @ true_counts)
    denominator = math.sqrt((n * n - float(pred_counts @ pred_counts)) * (n * n - float(true_counts @ true_counts)))
    return covariance / denominator if denominator else 0.0


def _sacrebleu_inputs(items: Sequence[Any]) -> tuple[list[tuple[str, ...]], list[str]]:
    """lm-eval's shapes for sacrebleu, decided from the first item as lm-eval does."""
    refs: list[Any] = [item[0] for item in items]
    preds: list[Any] = [item[1] for item in items]
    if not _is_non_str_iterable(refs[0]):
        refs = [[ref] for ref in refs]
    if _is_non_str_iterable(preds[0]):
        preds = [pred[0] for pred in preds]
    return list(zip(*refs, strict=False)), preds


def _is_non_str_iterable(value: Any) -> bool:
    return isinstance(value, Iterable) and not isinstance(value, str)


def _sacrebleu(kind: str, **options: Any) -> Aggregate:
    def score(items: Sequence[Any]) -> float:
        import sacrebleu  # the `metrics` extra; without it, failures.py says so in one sentence

        refs, preds = _sacrebleu_inputs(items)
        return float(getattr(sacrebleu, f"corpus_{kind}")(preds, refs, **options).score)

    return score


CORPUS: Mapping[str, tuple[Aggregate, Callable[[list[Any]], Any]]] = {
    "perplexity": (perplexity, lambda values: np.asarray(values, dtype=float)),
    "weighted_perplexity": (weighted_perplexity, lambda values: np.asarray(values, dtype=float).reshape(-1, 2)),
    "bits_per_byte": (bits_per_byte, lambda values: np.asarray(values, dtype=float).reshape(-1, 2)),
    "median": (median, lambda values: np.asarray(values, dtype=float)),
    "nanmean": (nanmean, lambda values: np.asarray(values, dtype=float)),
    "f1": (f1, lambda values: np.asarray(values).reshape(-1, 2)),
    "matthews_corrcoef": (matthews_corrcoef, lambda values: np.asarray(values).reshape(-1, 2)),
    "bleu": (_sacrebleu("bleu"), list),
    "chrf": (_sacrebleu("chrf"), list),
    "chrf++": (_sacrebleu("chrf", word_order=2), list),
    "ter": (_sacrebleu("ter"), list),
}
"""Corpus aggregation name → (the aggregation, how one side's items become its input)."""


def brier_per_document(item: Sequence[Any]) -> float:
    """One document's Σ_k (p_k − 1[k = gold])², whose mean is lm-eval's brier_score."""
    gold, probabilities = item
    return sum((float(p) - (1.0 if k == int(gold) else 0.0)) ** 2 for k, p in enumerate(probabilities))


def aggregation_of(metric: str, configured: Any) -> str:
    """The aggregation name a task uses for `metric`: its YAML's, else lm-eval's default."""
    if isinstance(configured, str) and configured:
        return configured
    return DEFAULT_AGGREGATIONS.get(metric, MEAN)
