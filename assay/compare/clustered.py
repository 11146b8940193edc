"""Standard errors for documents that are not independent draws, and their z tests.

Two structures break the paired tests' assumption of independent documents:

- **Clusters within a task** (questions sharing a passage, named by the task's
  `cluster_key`): the clustered SE of the mean difference (Miller, "Adding Error Bars to
  Evals", arXiv 2411.00640, appendix A), with the finite-cluster factor C/(C−1) that
  Inspect AI applies (`scorer/_metrics/std.py`):
  SE = sqrt( C/(C−1) · Σ_c (Σ_{i∈c} (dᵢ − d̄))² ) / n.
  With every document its own cluster this is exactly the paired SE, so naming a
  cluster_key never narrows an interval by itself.
- **Subtasks within a group**: the group's number is a weighted mean of its subtasks'
  means, Σ_j w_j·m_j (w_j = n_j/N when lm-eval weights by size, 1/k when not). The
  subtasks are fixed by the group's definition, and only their documents are samples, so
  the subtasks are strata, not sampled clusters: Var = Σ_j w_j²·SE_j², with SE_j each
  subtask's own paired (or clustered) SE. Clustering by subtask instead would measure only
  how much the subtasks' deltas differ from each other: with two subtasks it has one
  degree of freedom, and two subtasks that moved by the same amount would get SE 0.

Both are large-sample results, so the test is a z test: p from the normal tail, the
interval delta ± z_{1−α/2}·SE, the TOST interval delta ± z_{1−α}·SE.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from assay.compare import distributions, statistics

CLUSTERED, STRATIFIED = "clustered z", "stratified z"
Clusters = Sequence[str | None]
"""Per document, the cluster it belongs to; None is a cluster of its own."""


def clustered_se(differences: np.ndarray, clusters: Clusters) -> float:
    """sqrt(C/(C−1)·Σ_c(Σ_{i∈c}(dᵢ − d̄))²)/n; NaN below two documents or two clusters."""
    n = len(differences)
    ids = cluster_indices(clusters)
    count = int(ids.max()) + 1 if n else 0
    if n < 2 or count < 2:
        return math.nan
    sums = np.bincount(ids, weights=differences - differences.mean(), minlength=count)
    return math.sqrt(count / (count - 1) * float(sums @ sums)) / n


def cluster_indices(clusters: Clusters) -> np.ndarray:
    """Each document's cluster as 0..C−1, in first-seen order; every None a cluster of its own."""
    numbers: dict[str | tuple[int], int] = {}
    ids = np.empty(len(clusters), dtype=np.int64)
    for i, cluster in enumerate(clusters):
        ids[i] = numbers.setdefault(
            cluster if cluster is not None else (i,), len(numbers)
        )  # a tuple never equals a str
    return ids


def cluster_count(clusters: Clusters) -> int:
    return int(cluster_indices(clusters).max()) + 1 if len(clusters) else 0


def clustered_z(
    baseline: np.ndarray, candidate: np.ndarray, clusters: Clusters, *, alpha: float
) -> statistics.PairedTest:
    """The paired comparison of one task's mean metric with documents clustered."""
    differences = candidate - baseline
    gained, lost = _flips([baseline], [candidate])
    return z_test(
        CLUSTERED,
        n=len(differences),
        baseline=float(baseline.mean()),
        candidate=float(candidate.mean()),
        delta=float(differences.mean()),
        se=clustered_se(differences, clusters),
        agree=not differences.any(),
        alpha=alpha,
        gained=gained,
        lost=lost,
    )


@dataclasses.dataclass(frozen=True)
class Stratum:
    """One subtask of a group: its paired per-document values and its weight in the group."""

    baseline: np.ndarray
    candidate: np.ndarray
    weight: float
    clusters: Clusters | None = None


def stratified_z(strata: Sequence[Stratum], *, alpha: float) -> statistics.PairedTest:
    """A group's weighted mean compared: delta = Σ w_j·d̄_j, SE = sqrt(Σ w_j²·SE_j²)."""
    variance, delta, base, cand = 0.0, 0.0, 0.0, 0.0
    for stratum in strata:
        differences = stratum.candidate - stratum.baseline
        se = (
            statistics.paired_se(differences)
            if stratum.clusters is None
            else clustered_se(differences, stratum.clusters)
        )
        variance += stratum.weight**2 * se**2
        delta += stratum.weight * float(differences.mean())
        base += stratum.weight * float(stratum.baseline.mean())
        cand += stratum.weight * float(stratum.candidate.mean())
    gained, lost = _flips([s.baseline for s in strata], [s.candidate for s in strata])
    return z_test(
        STRATIFIED,
        n=sum(len(s.baseline) for s in strata),
        baseline=base,
        candidate=cand,
        delta=delta,
        se=math.sqrt(variance),
        agree=not any((s.candidate - s.baseline).any() for s in strata),
        alpha=alpha,
        gained=gained,
        lost=lost,
    )


def _flips(baselines: Sequence[np.ndarray], candidates: Sequence[np.ndarray]) -> tuple[int | None, int | None]:
    """Documents gained and lost, where every score is 0 or 1 (else None, None)."""
    base, cand = np.concatenate(baselines), np.concatenate(candidates)
    if not (np.isin(base, (0.0, 1.0)).all() and np.isin(cand, (0.0, 1.0)).all()):
        return None, None
    return int(np.count_nonzero((base == 0) & (cand == 1))), int(np.count_nonzero((base == 1) & (cand == 0)))


def z_test(
    test: str,
    *,
    n: int,
    baseline: float,
    candidate: float,
    delta: float,
    se: float,
    agree: bool,
    alpha: float,
    gained: int | None = None,
    lost: int | None = None,
) -> statistics.PairedTest:
    """A PairedTest from an estimate and its SE under the normal approximation.

    `agree`: every paired document scored the same in both runs, so p = 1 (as the paired t);
    a non-zero delta with SE 0 (a constant shift) gives p = 0.
    """
    if agree and n >= 2:
        p_value = 1.0
    elif se == 0 and n >= 2:
        p_value = 0.0
    else:
        p_value = distributions.normal_two_sided_p(delta / se) if se > 0 else math.nan
    return statistics.PairedTest(
        test=test,
        n=n,
        baseline=baseline,
        candidate=candidate,
        delta=delta,
        se=se,
        ci_low=_bound(delta, se, -1, 1 - alpha / 2),
        ci_high=_bound(delta, se, 1, 1 - alpha / 2),
        interval="normal",
        p_value=p_value,
        mde=statistics.minimum_detectable_effect(se, alpha=alpha, delta=delta),
        tost_low=_bound(delta, se, -1, 1 - alpha),
        tost_high=_bound(delta, se, 1, 1 - alpha),
        gained=gained,
        lost=lost,
    )


def _bound(delta: float, se: float, sign: int, level: float) -> float:
    return delta + sign * distributions.normal_quantile(level) * se
