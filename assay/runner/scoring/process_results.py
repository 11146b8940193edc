"""Per-document scores from a document's responses, for each output type.

This is lm-eval's built-in `process_results`: the metric names a task asks for decide
which keys a document produces; the values are what the aggregations then consume.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np


def score_loglikelihood(result: tuple[float, bool], metrics: Sequence[str]) -> dict[str, Any]:
    logprob, is_greedy = result
    scores: dict[str, Any] = {}
    if "perplexity" in metrics:
        scores["perplexity"] = logprob
    if "acc" in metrics:
        scores["acc"] = int(is_greedy)
    return scores


def score_rolling(logprob: float, text: str, metrics: Sequence[str]) -> dict[str, Any]:
    words = len(re.split(r"\s+", text))
    n_bytes = len(text.encode("utf-8"))
    scores: dict[str, Any] = {}
    if "word_perplexity" in metrics:
        scores["word_perplexity"] = (logprob, words)
    if "byte_perplexity" in metrics:
        scores["byte_perplexity"] = (logprob, n_bytes)
    if "bits_per_byte" in metrics:
        scores["bits_per_byte"] = (logprob, n_bytes)
    return scores


def _softmax(values: np.ndarray) -> np.ndarray:
    shifted = np.exp(values - np.max(values))
    probabilities: np.ndarray = shifted / shifted.sum()
    return probabilities


def score_multiple_choice(
    results: Sequence[tuple[float, bool]],
    *,
    choices: list[str],
    gold: Any,
    metrics: Sequence[str],
    multiple_target: bool,
) -> dict[str, Any]:
    lls_all = [float(ll) for ll, _ in results]
    greedy = [bool(g) for _, g in results]
    lls = np.array(lls_all)
    unconditional = None
    if "acc_mutual_info" in metrics and len(lls_all) == 2 * len(choices):
        lls, unconditional = np.array(lls_all[: len(choices)]), np.array(lls_all[len(choices) :])
    char_lengths = np.array([float(len(choice)) for choice in choices])
    byte_lengths = np.array([float(len(choice.encode("utf-8"))) for choice in choices])
    pred = int(np.argmax(lls))
    pred_norm = int(np.argmax(lls / char_lengths))
    pred_bytes = int(np.argmax(lls / byte_lengths))

    if isinstance(gold, list):
        gold = [index if index < len(choices) else -100 for index in gold]
    elif isinstance(gold, str):
        gold = choices.index(gold) if gold in choices else -100
    elif isinstance(gold, int):
        gold = gold if gold < len(choices) else -100

    if multiple_target:

        def hit(prediction: int) -> float:
            return 1.0 if prediction in gold else 0.0

        exact = int(any(greedy[i] if i != -100 else 0 for i in gold))
    else:

        def hit(prediction: int) -> float:
            return 1.0 if prediction == gold else 0.0

        exact = int(greedy[gold]) if gold != -100 else 0

    candidates: dict[str, Callable[[], Any]] = {
        "acc": lambda: hit(pred),
        "f1": lambda: (gold, pred),
        "mcc": lambda: (gold, pred),
        "acc_norm": lambda: hit(pred_norm),
        "acc_bytes": lambda: hit(pred_bytes),
        "exact_match": lambda: exact,
        "brier_score": lambda: (gold, _softmax(lls)),
        "likelihood": lambda: (gold, tuple(lls.tolist())),
    }
    scores = {name: make() for name, make in candidates.items() if name in metrics}
    if "acc_mutual_info" in metrics and unconditional is not None:
        scores["acc_mutual_info"] = hit(int(np.argmax(lls - unconditional)))
    return scores


def score_generation(
    result: Any,
    *,
    gold: Any,
    metric_fns: Mapping[str, tuple[Callable[..., Any], Mapping[str, Any]]],
    multiple_target: bool,
    cast_gold: bool,
) -> dict[str, Any]:
    """Apply each generation metric as lm-eval does (keyword call, then the passthrough form)."""
    if multiple_target:
        gold = list(gold) if isinstance(gold, (list, tuple)) else [gold]
    elif cast_gold and type(gold) is not type(result) and not isinstance(result, list):
        gold = type(result)(gold)
    scores: dict[str, Any] = {}
    for name, (fn, kwargs) in metric_fns.items():
        if multiple_target:
            if name == "exact_match":
                value = _call_metric(fn, kwargs, gold, [result] * len(gold), name)
                score: Any = 1.0 if value > 0.0 else 0.0
            else:
                hits = [
                    _call_metric(fn, kwargs, [option], [result], name, passthrough=[option, result]) for option in gold
                ]
                score = 1.0 if any(hits) else 0.0
        else:
            score = _call_metric(fn, kwargs, [gold], [result], name, passthrough=[gold, result], keep_dict=True)
        if isinstance(score, dict):
            scores.update(score)
        else:
            scores[name] = score
    return scores


def _call_metric(
    fn: Callable[..., Any],
    kwargs: Mapping[str, Any],
    references: list[Any],
    predictions: list[Any],
    name: str,
    *,
    passthrough: list[Any] | None = None,
    keep_dict: bool = False,
) -> Any:
    try:
        value = fn(references=references, predictions=predictions, **kwargs)
    except TypeError:
        # lm-eval's passthrough metrics (bleu, chrf, ...) take one [gold, prediction] item.
        if passthrough is None:
            raise
        value = fn(passthrough)
    if isinstance(value, dict) and not keep_dict:
        return value[name]
    return value
