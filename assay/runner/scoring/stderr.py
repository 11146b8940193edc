"""Standard errors of aggregated metrics, bit-exact with lm-eval 0.4.13 but fast.

lm-eval uses a closed form for `mean` and a bootstrap for a fixed list of aggregations:
chunks of min(1000, iters) replicates, chunk i drawing with `random.Random(i)`, each
replicate `f(rnd.choices(items, k=len(items)))`, and the result the sample standard
deviation (ddof=1) of the replicates. With 100,000 iterations that takes minutes per
metric in pure Python.

Here the same draws are made in numpy: `random.Random(i)`'s Mersenne Twister state is
moved into a `numpy.random.RandomState`, whose `random_sample` yields the very doubles
`random.random()` would, so `choices`' indices floor(random() * n) come out as one array.
The statistic is then computed for a whole block of replicates at once, in exactly the
floating-point order lm-eval's function uses (sequential sums, exact integer counts,
`math.exp` rather than numpy's). Inputs outside a fast path's proven domain fall back to
calling the aggregation on each resample, as lm-eval does.
"""

from __future__ import annotations

import math
import random
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from assay.runner.scoring import aggregations, metrics
from assay.runner.scoring.aggregations import AGGREGATIONS, Aggregation

#: Aggregations whose stderr lm-eval bootstraps.
BOOTSTRAPPED = frozenset(
    {"median", "matthews_corrcoef", "f1", "perplexity", "bleu", "chrf", "chrf++", "ter", "nanmean"}
)
#: lm-eval caps the bootstrap at 100 iterations for these *metric* names (not aggregations).
CAPPED_METRICS = frozenset({"bleu", "chrf", "chrf++", "ter"})
CAPPED_ITERS = 100

_BLOCK_ELEMENTS = 1 << 22  # resampled values held at once (~32 MiB of float64)


def _sample_stddev(values: Sequence[Any]) -> float:
    # Python's sum, as lm-eval, so that the rounding is the same.
    mu = sum(values) / len(values)
    return math.sqrt(sum([(x - mu) ** 2 for x in values]) / (len(values) - 1))


def mean_stderr(items: Sequence[Any]) -> float:
    """Closed form for a mean: sample stdev (ddof=1) / √n."""
    return _sample_stddev(items) / math.sqrt(len(items))


def acc_all_stderr(items: Sequence[tuple[Any, Any]]) -> float:
    """Closed-form stderr for `acc_all` used as an aggregation.

    lm-eval quirk: acc_all groups answers by (paragraph, question) but its stderr groups by
    question id alone.
    """
    by_question: dict[Any, list[bool]] = {}
    for pred, doc in items:
        by_question.setdefault(doc["idx"]["question"], []).append((doc["label"] == 1) == pred)
    return mean_stderr([int(all(v)) for v in by_question.values()])


def _aggregation_name(aggregation: str | Callable[..., Any]) -> str | None:
    """Registered name of an aggregation given by name or by function; None if custom."""
    if isinstance(aggregation, str):
        AGGREGATIONS.get(aggregation)  # unknown names raise a UserError with suggestions
        return aggregation
    for name in AGGREGATIONS:
        if AGGREGATIONS.get(name) is aggregation:
            return name
    return None


def stderr_for(
    aggregation: str | Callable[..., Any],
    items: Sequence[Any],
    bootstrap_iters: int,
    *,
    metric: str | None = None,
) -> float | None:
    """The `<metric>_stderr,<filter>` value lm-eval reports; None where it writes "N/A".

    `metric` is the metric's name, which decides lm-eval's 100-iteration cap for
    bleu/chrf/chrf++/ter; it defaults to the aggregation's name.
    """
    if not isinstance(bootstrap_iters, int) or bootstrap_iters <= 0 or len(items) <= 1:
        return None
    if aggregation is metrics.acc_all:
        return acc_all_stderr(items)
    name = _aggregation_name(aggregation)
    if name == "mean":
        return mean_stderr(items)
    if name is None or name not in BOOTSTRAPPED:
        return None
    iters = min(bootstrap_iters, CAPPED_ITERS) if (metric or name) in CAPPED_METRICS else bootstrap_iters
    return bootstrap_stderr(name, items, iters)


def bootstrap_stderr(name: str, items: Sequence[Any], iters: int) -> float:
    """lm-eval's bootstrap_stderr for the registered aggregation `name`."""
    chunk = min(1000, iters)
    n_chunks = iters // chunk
    if n_chunks * chunk < 2:
        raise ValueError(f"bootstrap_iters={iters} gives fewer than two replicates")
    fast = _FAST_PATHS.get(name)
    prepared = fast[0](items) if fast else None
    replicates: list[Any] = []
    for seed in range(n_chunks):
        if fast is not None and prepared is not None:
            for block in _resample_indices(seed, len(items), chunk):
                replicates.extend(fast[1](prepared, block))
        else:
            replicates.extend(_slow_replicates(AGGREGATIONS.get(name), items, seed, chunk))
    return _sample_stddev(replicates)


def _slow_replicates(f: Aggregation, items: Sequence[Any], seed: int, count: int) -> list[Any]:
    """Exactly lm-eval's loop: one `random.Random(seed)` per chunk."""
    rnd = random.Random(seed)
    return [f(rnd.choices(items, k=len(items))) for _ in range(count)]


def _resample_indices(seed: int, n: int, rows: int) -> Iterator[np.ndarray]:
    """The indices `random.Random(seed).choices(range(n), k=n)` draws, `rows` times over.

    Yields (block, n) int64 arrays. choices() picks floor(random() * n); numpy's legacy
    MT19937 random_sample builds its doubles from the same two 32-bit words.
    """
    _version, internal, _gauss = random.Random(seed).getstate()
    generator = np.random.RandomState()
    generator.set_state(("MT19937", np.array(internal[:-1], dtype=np.uint32), internal[-1]))  # type: ignore[arg-type]  # numpy's stub wants the optional gauss fields too
    per_block = max(1, _BLOCK_ELEMENTS // n)
    done = 0
    while done < rows:
        block = min(per_block, rows - done)
        draws = generator.random_sample(block * n).reshape(block, n)
        # Non-negative, so truncation is floor.
        yield (draws * float(n)).astype(np.int64)
        done += block


# -- fast paths: (prepare(items) -> state or None when unsupported, replicates(state, idx)) --


def _numeric_array(items: Sequence[Any]) -> np.ndarray | None:
    """int64 array for all-integer items, float64 for all-double ones, else None."""
    kinds = {type(x) for x in items}
    if kinds <= {int, bool, np.int64}:
        try:
            return np.array(items, dtype=np.int64)
        except OverflowError:
            return None
    if kinds <= {float, np.float64}:
        return np.array(items, dtype=np.float64)
    return None


def _prepare_median(items: Sequence[Any]) -> np.ndarray | None:
    values = _numeric_array(items)
    if values is None or (values.dtype == np.float64 and np.isnan(values).any()):
        return None  # sorted() with NaNs depends on order: leave it to the slow path
    return values


def _median_replicates(values: np.ndarray, idx: np.ndarray) -> list[Any]:
    k = idx.shape[1] // 2
    result: list[Any] = np.partition(values[idx], k, axis=1)[:, k].tolist()
    return result


def _prepare_nanmean(items: Sequence[Any]) -> np.ndarray | None:
    # Integer input makes np.nanmean take np.mean's buffered cast-and-sum: slow path.
    values = _numeric_array(items)
    return values if values is not None and values.dtype == np.float64 else None


def _nanmean_replicates(values: np.ndarray, idx: np.ndarray) -> list[Any]:
    # np.nanmean along the contiguous last axis sums each row pairwise, exactly as it
    # does for the 1-D array lm-eval builds from one resample; an all-NaN row is NaN.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result: list[Any] = np.nanmean(values[idx], axis=1).tolist()
    return result


def _prepare_perplexity(items: Sequence[Any]) -> np.ndarray | None:
    # From Python 3.12 on, sum() of floats is compensated (Neumaier), which a cumulative
    # sum does not reproduce; those interpreters take the slow path.
    if sys.version_info >= (3, 12):
        return None
    values = _numeric_array(items)
    return values if values is not None and values.dtype == np.float64 else None


def _perplexity_replicates(values: np.ndarray, idx: np.ndarray) -> list[Any]:
    n = idx.shape[1]
    # cumsum is strictly left to right, like Python 3.11's sum(); math.exp, not np.exp,
    # whose SIMD implementation may differ in the last bit.
    totals = np.cumsum(values[idx], axis=1)[:, -1]
    return [math.exp(-(total / n)) for total in totals.tolist()]


def _prepare_pairs(items: Sequence[Any]) -> tuple[np.ndarray, np.ndarray] | None:
    try:
        golds, preds = zip(*items, strict=False)
    except (TypeError, ValueError):
        return None
    gold_arr, pred_arr = _numeric_array(golds), _numeric_array(preds)
    if gold_arr is None or pred_arr is None or gold_arr.dtype != np.int64 or pred_arr.dtype != np.int64:
        return None
    return gold_arr, pred_arr


def _prepare_f1(items: Sequence[Any]) -> tuple[np.ndarray, np.ndarray] | None:
    pairs = _prepare_pairs(items)
    # Only true binary 0/1 labels: anything else makes sklearn raise or relabel.
    if pairs is None or not all(np.isin(arr, (0, 1)).all() for arr in pairs):
        return None
    return pairs


def _f1_replicates(pairs: tuple[np.ndarray, np.ndarray], idx: np.ndarray) -> list[Any]:
    golds, preds = pairs[0][idx], pairs[1][idx]
    true_pos = (golds & preds).sum(axis=1).astype(np.float64)
    denominator = golds.sum(axis=1).astype(np.float64) + preds.sum(axis=1).astype(np.float64)
    # sklearn: 2·tp / (Σgold + Σpred) from exact integer counts; 0.0 when undefined.
    safe = np.where(denominator == 0, 1.0, denominator)
    result: list[Any] = np.where(denominator == 0, 0.0, (2.0 * true_pos) / safe).tolist()
    return result


def _prepare_mcc(items: Sequence[Any]) -> tuple[np.ndarray, np.ndarray, int] | None:
    pairs = _prepare_pairs(items)
    if pairs is None or float(len(items)) ** 2 >= 2.0**53:
        return None  # counts must stay exact in float64
    _, codes = np.unique(np.concatenate(pairs), return_inverse=True)
    n = len(items)
    return codes[:n].astype(np.int64), codes[n:].astype(np.int64), int(codes.max()) + 1


def _class_counts(labels: np.ndarray, n_classes: int) -> np.ndarray:
    rows = labels.shape[0]
    offsets = np.arange(rows, dtype=np.int64)[:, None] * n_classes
    counts = np.bincount((labels + offsets).ravel(), minlength=rows * n_classes)
    return counts.reshape(rows, n_classes).astype(np.float64)


def _mcc_replicates(state: tuple[np.ndarray, np.ndarray, int], idx: np.ndarray) -> list[Any]:
    gold_codes, pred_codes, n_classes = state
    golds, preds = gold_codes[idx], pred_codes[idx]
    t_sum, p_sum = _class_counts(golds, n_classes), _class_counts(preds, n_classes)
    n_correct = (golds == preds).sum(axis=1).astype(np.float64)
    n = float(idx.shape[1])
    # sklearn's formula; every term is an exact integer in float64, so the order of the
    # dot products does not matter, and the final product, sqrt and division are the same.
    cov_ytyp = n_correct * n - (t_sum * p_sum).sum(axis=1)
    cov_ypyp = n**2 - (p_sum * p_sum).sum(axis=1)
    cov_ytyt = n**2 - (t_sum * t_sum).sum(axis=1)
    product = cov_ypyp * cov_ytyt
    safe = np.where(product == 0, 1.0, product)
    result: list[Any] = np.where(product == 0, 0.0, cov_ytyp / np.sqrt(safe)).tolist()
    return result


class _CorpusStats:
    """Per-segment sacrebleu statistics, computed once for all replicates."""

    def __init__(self, metric: Any, stats: list[Any]) -> None:
        self.metric = metric
        self.stats = stats


def _sacrebleu_metric(name: str) -> Any:
    """The metric object sacrebleu's corpus_bleu/corpus_chrf/corpus_ter build (their defaults)."""
    from sacrebleu.metrics import BLEU, CHRF, TER  # type: ignore[attr-defined]  # re-exported without __all__

    if name == "bleu":
        return BLEU(
            lowercase=False,
            force=False,
            tokenize=BLEU.TOKENIZER_DEFAULT,
            smooth_method="exp",
            smooth_value=None,
            effective_order=False,
        )
    if name in ("chrf", "chrf++"):
        word_order = 2 if name == "chrf++" else CHRF.WORD_ORDER
        return CHRF(
            char_order=CHRF.CHAR_ORDER, word_order=word_order, beta=CHRF.BETA, whitespace=False, eps_smoothing=False
        )
    return TER(normalized=False, no_punct=False, asian_support=False, case_sensitive=False)


def _homogeneous_shapes(items: Sequence[Any]) -> bool:
    """Whether every resample gets the same reference/prediction layout.

    lm-eval picks the layout from each resample's first item; with mixed layouts that
    choice varies between resamples, which only the slow path reproduces.
    """
    refs = [item[0] for item in items]
    preds = [item[1] for item in items]
    if all(isinstance(ref, str) for ref in refs):
        refs_ok = True
    else:
        lengths = {len(ref) if aggregations.is_non_str_iterable(ref) else -1 for ref in refs}
        refs_ok = len(lengths) == 1 and -1 not in lengths
    preds_ok = all(isinstance(pred, str) for pred in preds) or all(
        aggregations.is_non_str_iterable(pred) and len(pred) == 1 for pred in preds
    )
    return refs_ok and preds_ok


def _make_prepare_corpus(name: str) -> Callable[[Sequence[Any]], _CorpusStats | None]:
    def prepare(items: Sequence[Any]) -> _CorpusStats | None:
        try:
            if not _homogeneous_shapes(items):
                return None
            streams, preds = aggregations.sacrebleu_inputs(items)
            metric = _sacrebleu_metric(name)
            metric._check_corpus_score_args(preds, streams)
            return _CorpusStats(metric, list(metric._extract_corpus_statistics(preds, streams)))
        except Exception:  # anything odd: let the slow path fail or succeed as lm-eval
            return None

    return prepare


def _corpus_replicates(corpus: _CorpusStats, idx: np.ndarray) -> list[Any]:
    # A resampled corpus's segment statistics are the resampled segments' statistics;
    # sacrebleu then sums them in corpus order and scores, exactly as corpus_score does.
    stats = corpus.stats
    return [corpus.metric._aggregate_and_compute([stats[i] for i in row]).score for row in idx.tolist()]


_FAST_PATHS: dict[str, tuple[Callable[[Sequence[Any]], Any], Callable[[Any, np.ndarray], list[Any]]]] = {
    "median": (_prepare_median, _median_replicates),
    "nanmean": (_prepare_nanmean, _nanmean_replicates),
    "perplexity": (_prepare_perplexity, _perplexity_replicates),
    "f1": (_prepare_f1, _f1_replicates),
    "matthews_corrcoef": (_prepare_mcc, _mcc_replicates),
    **{name: (_make_prepare_corpus(name), _corpus_replicates) for name in ("bleu", "chrf", "chrf++", "ter")},
}


# -- groups -----------------------------------------------------------------------------


def aggregate_group_metric(values: Sequence[float], sizes: Sequence[int], *, weight_by_size: bool = True) -> float:
    """A group's value from its subtasks': Σ vᵢnᵢ / Σ nᵢ, or the plain mean."""
    weights = list(sizes) if weight_by_size else [1] * len(sizes)
    if len(values) != len(weights):
        raise ValueError("one size per value is needed")
    return sum([value * weight for value, weight in zip(values, weights, strict=False)]) / sum(weights)


def pooled_group_stderr(stderrs: Sequence[float], sizes: Sequence[int]) -> float:
    """Stderr of a size-weighted group mean from pooled subtask variances."""
    if len(stderrs) != len(sizes):
        raise ValueError("one size per stderr is needed")
    pooled_variance = sum([(size - 1) * stderr**2 * size for size, stderr in zip(sizes, stderrs, strict=False)]) / (
        sum(sizes) - len(sizes)
    )
    return float(np.sqrt(pooled_variance / sum(sizes)))


def unweighted_group_stderr(stderrs: Sequence[float]) -> float:
    """Stderr of the unweighted mean of k independent means: √Σseᵢ² / k."""
    return float(np.sqrt(sum(stderr**2 for stderr in stderrs)) / len(stderrs))


def group_stderr(stderrs: Sequence[float | None], sizes: Sequence[int], *, weight_by_size: bool = True) -> float | None:
    """What lm-eval 0.4.13 reports as a group's stderr: None ("N/A") if any subtask has none.

    Pooled for a size-weighted group, √Σse²/k for an unweighted one (0.4.13's `Group`).
    """
    known = [stderr for stderr in stderrs if stderr is not None]
    if not known or len(known) != len(stderrs):
        return None
    if weight_by_size:
        return pooled_group_stderr(known, sizes)
    return unweighted_group_stderr(known)


__all__ = [
    "BOOTSTRAPPED",
    "CAPPED_METRICS",
    "acc_all_stderr",
    "aggregate_group_metric",
    "bootstrap_stderr",
    "group_stderr",
    "mean_stderr",
    "pooled_group_stderr",
    "stderr_for",
    "unweighted_group_stderr",
]
