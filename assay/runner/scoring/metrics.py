"""Per-sample metrics: what each metric name means, how it is aggregated, which way is up.

Most of lm-eval's metrics are pass-throughs: `process_results` already produced the
per-document value (1.0/0.0 for acc, the log-likelihood for perplexity, a (gold, pred)
pair for f1) and the real work happens in the aggregation named here (see
`aggregations.py`). Only `exact_match` and `acc_all` compute something per call. Names,
aggregations, directions and output types follow lm-eval 0.4.13's registrations.
"""

from __future__ import annotations

import dataclasses
import re
import string
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from assay.runner.models.instance import OutputType
from assay.runner.registry import Registry
from assay.runner.scoring.bounded_regex import regex_bound


@dataclasses.dataclass(frozen=True)
class MetricSpec:
    """A built-in metric as a task's `metric_list` refers to it by name."""

    name: str
    fn: Callable[..., Any]
    """Per-sample function: a pass-through for most; `exact_match(references=, predictions=)`."""
    aggregation: str
    """Name in `AGGREGATIONS` used when the task's YAML names none."""
    higher_is_better: bool
    output_types: tuple[OutputType, ...]
    """Output types lm-eval declares the metric for (informative, not enforced by lm-eval)."""


METRICS: Registry[MetricSpec] = Registry("metric")

#: Metrics a task gets when its YAML has no metric_list.
DEFAULT_METRICS: Mapping[OutputType, tuple[str, ...]] = {
    "loglikelihood": ("perplexity", "acc"),
    "loglikelihood_rolling": ("word_perplexity", "byte_perplexity", "bits_per_byte"),
    "multiple_choice": ("acc", "acc_norm"),
    "generate_until": ("exact_match",),
}


def passthrough(items: Any) -> Any:
    """The per-sample value is already final; the aggregation does the work."""
    return items


def bypass(items: Any) -> None:
    """`--predict_only`: no score (its aggregation reports 999)."""
    return None


_PUNCTUATION = str.maketrans("", "", string.punctuation)
_DIGITS = str.maketrans("", "", string.digits)


def exact_match(
    *,
    references: Sequence[Any],
    predictions: Sequence[Any],
    regexes_to_ignore: Sequence[str] | None = None,
    ignore_case: bool = False,
    ignore_punctuation: bool = False,
    ignore_numbers: bool = False,
) -> dict[str, Any]:
    """Share of predictions equal to their reference, after the optional normalisations.

    lm-eval's port of HF `evaluate`'s exact_match: numpy string arrays, so numpy's
    semantics apply (fixed-width unicode arrays drop trailing NULs before comparing);
    regexes are removed first (in order), then case, ASCII punctuation, ASCII digits.
    """
    preds: Any = predictions
    refs: Any = references
    if regexes_to_ignore is not None:
        # lm-eval quirk: with an empty list the inputs stay Python lists, and `==` below
        # becomes list equality (one bool) unless a later option turns them into arrays.
        for pattern in regexes_to_ignore:
            with regex_bound(pattern):  # a task file's pattern: bounded in time (bounded_regex)
                preds = np.array([re.sub(pattern, "", x) for x in preds])
                refs = np.array([re.sub(pattern, "", x) for x in refs])
    else:
        preds = np.asarray(preds)
        refs = np.asarray(refs)
    if ignore_case:
        preds, refs = np.char.lower(preds), np.char.lower(refs)
    if ignore_punctuation:
        # numpy's stub wants a 256-char table; str.maketrans's dict is what str.translate takes.
        preds, refs = np.char.translate(preds, _PUNCTUATION), np.char.translate(refs, _PUNCTUATION)  # type: ignore[call-overload]
    if ignore_numbers:
        preds, refs = np.char.translate(preds, _DIGITS), np.char.translate(refs, _DIGITS)  # type: ignore[call-overload]
    return {"exact_match": np.mean(preds == refs)}


def acc_all(items: Sequence[tuple[Any, Mapping[str, Any]]]) -> float:
    """MultiRC: a question counts as right only if every answer option was judged right.

    Items are (prediction, doc); docs carry idx.paragraph, idx.question and label.
    """
    by_question: dict[tuple[Any, Any], list[bool]] = {}
    for pred, doc in items:
        key = (doc["idx"]["paragraph"], doc["idx"]["question"])
        by_question.setdefault(key, []).append((doc["label"] == 1) == pred)
    return float(np.mean([int(all(v)) for v in by_question.values()]))


def _define(
    name: str,
    *,
    aggregation: str,
    higher_is_better: bool,
    output_types: tuple[OutputType, ...],
    fn: Callable[..., Any] = passthrough,
) -> None:
    METRICS.register(name)(MetricSpec(name, fn, aggregation, higher_is_better, output_types))


_LL_MC: tuple[OutputType, ...] = ("loglikelihood", "multiple_choice")
_MC: tuple[OutputType, ...] = ("multiple_choice",)
_GEN: tuple[OutputType, ...] = ("generate_until",)
_ROLLING: tuple[OutputType, ...] = ("loglikelihood_rolling",)

_define("acc", aggregation="mean", higher_is_better=True, output_types=_LL_MC)
_define("acc_norm", aggregation="mean", higher_is_better=True, output_types=_LL_MC)
_define("acc_bytes", aggregation="mean", higher_is_better=True, output_types=_LL_MC)
_define("acc_mutual_info", aggregation="mean", higher_is_better=True, output_types=_MC)
# lm-eval registers acc_all for loglikelihood with a "mean" aggregation.
_define("acc_all", aggregation="mean", higher_is_better=True, output_types=("loglikelihood",), fn=acc_all)
_define("brier_score", aggregation="brier_score", higher_is_better=False, output_types=_MC)
_define("likelihood", aggregation="mean", higher_is_better=True, output_types=_MC)
_define("mcc", aggregation="matthews_corrcoef", higher_is_better=True, output_types=_MC)
_define("f1", aggregation="f1", higher_is_better=True, output_types=_MC)
_define("exact_match", aggregation="mean", higher_is_better=True, output_types=_GEN, fn=exact_match)
_define("bleu", aggregation="bleu", higher_is_better=True, output_types=_GEN)
_define("chrf", aggregation="chrf", higher_is_better=True, output_types=_GEN)
_define("chrf++", aggregation="chrf++", higher_is_better=True, output_types=_GEN)
_define("ter", aggregation="ter", higher_is_better=False, output_types=_GEN)
_define("perplexity", aggregation="perplexity", higher_is_better=False, output_types=("loglikelihood",))
_define("word_perplexity", aggregation="weighted_perplexity", higher_is_better=False, output_types=_ROLLING)
_define("byte_perplexity", aggregation="weighted_perplexity", higher_is_better=False, output_types=_ROLLING)
_define("bits_per_byte", aggregation="bits_per_byte", higher_is_better=False, output_types=_ROLLING)
_define(
    "bypass",
    aggregation="bypass",
    higher_is_better=True,
    output_types=("loglikelihood", "multiple_choice", "generate_until"),
    fn=bypass,
)


def compute_metric(
    metric: str | Callable[..., Any],
    references: Sequence[Any],
    predictions: Sequence[Any],
    **kwargs: Any,
) -> Any:
    """Score one generation as lm-eval's generate_until `process_results` does.

    The metric is first called as `fn(references=..., predictions=..., **kwargs)` (the HF
    `evaluate` convention); on TypeError it is called as `fn([reference, prediction])`,
    which is how pass-through metrics like bleu receive their (ref, pred) item. The result
    is returned as is: a dict (e.g. {"exact_match": 1.0}) is for the caller to spread into
    per-key metrics.
    """
    fn = METRICS.get(metric).fn if isinstance(metric, str) else metric
    try:
        return fn(references=references, predictions=predictions, **kwargs)
    except TypeError:
        # lm-eval quirk: any TypeError, even one raised inside the metric, triggers this.
        return fn([references[0], predictions[0]])
