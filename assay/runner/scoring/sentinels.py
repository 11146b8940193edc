"""Plausibility checks of a run's own scores: what a broken engine or endpoint produces.

A wrong score that looks right is the worst failure of an evaluation. The published ones
this module catches: a vLLM engine out of memory during prompt logprobs reported MMLU at
0.069 with exit 0 (significantly *below* the 0.25 of chance: a random model is at chance,
not below it); a server without echoed prompt logprobs scores every choice alike, so
multiple choice comes out at exactly chance; an answer cut before the end of its
reasoning is parsed as the answer. Each check is a pure function of per-document evidence
(`DocEvidence`, built from the live requests or from a samples JSONL) and the task's
aggregated row, so that a run and `assay check` on lm-eval's outputs decide alike.

A task adversarial by design declares in its YAML which checks do not apply to it
(`metadata: {sentinels_skip: [below_chance]}`: TruthfulQA's distractors pull real models
below chance).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from assay.run_options import SentinelSettings

CHECKS = ("below_chance", "degenerate", "empty", "unparsed", "truncated", "metric_range")
"""Per-task checks, in report order; `retried` and `cut_by_length` are the run's (served models)."""

SKIP_KEY = "sentinels_skip"
_MIN_REPEATED = 5
"""Documents below which the same choice scores across documents are not called degenerate."""

# A metric's possible values; a metric not listed is checked only for NaN.
_RANGES: Mapping[str, tuple[float, float]] = {
    **{name: (0.0, 1.0) for name in ("acc", "acc_norm", "acc_bytes", "acc_mutual_info", "exact_match", "f1")},
    "mcc": (-1.0, 1.0),
    "brier_score": (0.0, 2.0),
    **{name: (1.0, math.inf) for name in ("perplexity", "word_perplexity", "byte_perplexity")},
    "bits_per_byte": (0.0, math.inf),
    **{name: (0.0, 100.0) for name in ("bleu", "chrf", "chrf++")},
    "ter": (0.0, math.inf),
}


@dataclasses.dataclass(frozen=True)
class DocEvidence:
    """What one document's responses say about the engine, beside its metric values."""

    choice_logprobs: tuple[float, ...] | None = None
    """A multiple-choice document's log-likelihood per choice (None for other kinds)."""
    n_choices: int | None = None
    correct: float | None = None
    """Its `acc` (1 or 0 where the task's accuracy is a hit), None without one."""
    answer_empty: bool | None = None
    """A generation that is empty or only whitespace (None for other kinds)."""
    answer_unparsed: tuple[bool, ...] = ()
    """Per extracting filter, whether it found nothing (lm-eval's "[invalid]" fallback)."""
    answer_truncated: bool | None = None
    """A generation that opened a reasoning trace and never closed it."""


@dataclasses.dataclass(frozen=True)
class Finding:
    """One check of one task: whether it passed, and the figures it decided on."""

    check: str
    passed: bool
    figures: Mapping[str, Any]
    reason: str = ""
    """One sentence where it failed."""

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"passed": self.passed, **self.figures}
        if self.reason:
            out["reason"] = self.reason
        return out


@dataclasses.dataclass(frozen=True)
class TaskSentinels:
    task: str
    findings: tuple[Finding, ...]
    skipped: tuple[str, ...] = ()
    """Checks the task's metadata says do not apply to it."""

    @property
    def trusted(self) -> bool:
        return all(finding.passed for finding in self.findings)

    @property
    def failures(self) -> tuple[Finding, ...]:
        return tuple(finding for finding in self.findings if not finding.passed)

    def as_dict(self) -> dict[str, Any]:
        return {
            "trusted": self.trusted,
            "checks": {finding.check: finding.as_dict() for finding in self.findings},
            **({"skipped": list(self.skipped)} if self.skipped else {}),
        }


def skipped_checks(config: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The checks a task's config (its `metadata`) says do not apply to it."""
    metadata = (config or {}).get("metadata")
    named = metadata.get(SKIP_KEY) if isinstance(metadata, Mapping) else None
    if isinstance(named, str):
        named = [named]
    return tuple(str(name) for name in named) if isinstance(named, (list, tuple)) else ()


def check_task(
    task: str,
    *,
    output_type: str,
    evidence: Sequence[DocEvidence],
    metrics: Mapping[str, Any],
    settings: SentinelSettings,
    skip: Iterable[str] = (),
) -> TaskSentinels:
    """Every check that applies to a task of `output_type`, on its documents' evidence and
    its aggregated `metrics` (metric name → value, one filter's or all of them)."""
    skipped = tuple(name for name in CHECKS if name in set(skip))
    findings: list[Finding] = []
    if output_type == "multiple_choice":
        findings += [below_chance(evidence, settings.below_chance_alpha), degenerate(evidence, settings)]
    if output_type == "generate_until":
        findings += generation_findings(evidence, settings)
    findings.append(metric_range(metrics))
    kept = tuple(finding for finding in findings if finding.check not in skipped)
    return TaskSentinels(task, kept, skipped)


def below_chance(evidence: Sequence[DocEvidence], alpha: float) -> Finding:
    """Accuracy significantly below 1/K: one-sided exact binomial test (K averaged over documents)."""
    scored = [doc for doc in evidence if doc.correct is not None and doc.n_choices]
    hits = [doc.correct for doc in scored]
    if not scored or any(hit not in (0.0, 1.0) for hit in hits):
        return Finding("below_chance", True, {"documents": len(scored), "applies": False})
    n, k = len(scored), int(sum(hits))  # type: ignore[arg-type]
    chance = sum(1.0 / doc.n_choices for doc in scored if doc.n_choices) / n
    p_value = binomial_lower_tail(k, n, chance)
    figures = {"documents": n, "accuracy": k / n, "chance": chance, "p_value": p_value, "alpha": alpha}
    if p_value < alpha:
        reason = (
            f"accuracy {k / n:.3f} on {n} documents is significantly below the chance of {chance:.3f} "
            f"(one-sided binomial p = {p_value:.2g} < {alpha:g}): the engine may have failed while scoring"
        )
        return Finding("below_chance", False, figures, reason)
    return Finding("below_chance", True, figures)


def degenerate(evidence: Sequence[DocEvidence], settings: SentinelSettings) -> Finding:
    """Log-likelihoods that do not discriminate: every choice of a document alike, or one
    vector of choice scores repeated across documents (a server that does not echo them)."""
    vectors = [doc.choice_logprobs for doc in evidence if doc.choice_logprobs and len(doc.choice_logprobs) > 1]
    if not vectors:
        return Finding("degenerate", True, {"documents": 0, "applies": False})
    n = len(vectors)
    alike = sum(1 for vector in vectors if len(set(vector)) == 1) / n
    # two documents that share a prompt and choices (a dataset's duplicate) are not a pattern
    repeated = Counter(vectors).most_common(1)[0][1] / n if n >= _MIN_REPEATED else 0.0
    limit = settings.degenerate_fraction
    figures = {"documents": n, "all_choices_equal": alike, "same_scores_across_documents": repeated, "limit": limit}
    if alike > limit:
        reason = f"{alike:.0%} of {n} documents scored every choice alike: the log-likelihoods do not discriminate"
        return Finding("degenerate", False, figures, reason + " (does the server echo prompt logprobs?)")
    if repeated > limit:
        reason = f"{repeated:.0%} of {n} documents got the very same choice scores: they do not depend on the prompt"
        return Finding("degenerate", False, figures, reason)
    return Finding("degenerate", True, figures)


def generation_findings(evidence: Sequence[DocEvidence], settings: SentinelSettings) -> list[Finding]:
    """Empty, unparsed and truncated answers, each as a fraction of the task's generations."""
    answers = [doc for doc in evidence if doc.answer_empty is not None]
    n = len(answers)
    empty = sum(1 for doc in answers if doc.answer_empty) / n if n else 0.0
    truncated = sum(1 for doc in answers if doc.answer_truncated) / n if n else 0.0
    filters = max((len(doc.answer_unparsed) for doc in answers), default=0)
    # An answer counts as unparsed when no extracting filter of the task found anything in it:
    # a strict format a weak model misses is not a broken engine while a lenient filter still reads it.
    unparsed = sum(1 for doc in answers if doc.answer_unparsed and all(doc.answer_unparsed)) / n if filters else 0.0
    return [
        _fraction("empty", empty, n, settings.empty_fraction, "answers are empty"),
        _fraction(
            "unparsed",
            unparsed,
            n if filters else 0,
            settings.unparsed_fraction,
            "answers had nothing the task's filters could extract",
        ),
        _fraction("truncated", truncated, n, settings.truncated_fraction, "answers were cut inside their reasoning"),
    ]


def _fraction(check: str, fraction: float, n: int, limit: float, what: str, *, unit: str = "documents") -> Finding:
    figures = {unit: n, "fraction": fraction, "limit": limit}
    if n and fraction > limit:
        return Finding(check, False, figures, f"{fraction:.0%} of {n} {what} (limit {limit:.0%})")
    return Finding(check, True, figures)


def metric_range(metrics: Mapping[str, Any]) -> Finding:
    """Every aggregated metric is a number within its possible range (NaN never is); keys are
    metric names or lm-eval's `metric,filter`."""
    bad: dict[str, Any] = {}
    for name, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        low, high = _RANGES.get(name.split(",")[0], (-math.inf, math.inf))
        if math.isnan(value) or not low <= value <= high or (name.split(",")[0] in _RANGES and math.isinf(value)):
            bad[name] = value if math.isfinite(value) else str(value)
    figures = {"metrics": len(metrics), "out_of_range": bad}
    if bad:
        listed = ", ".join(f"{name} = {value}" for name, value in bad.items())
        return Finding("metric_range", False, figures, f"{listed} outside the possible range")
    return Finding("metric_range", True, figures)


def served_findings(health: Mapping[str, int], settings: SentinelSettings) -> list[Finding]:
    """A served model's requests: the fraction that needed a retry; of its generations, the
    fraction cut before the end of their reasoning (no think_end_token) and the fraction
    stopped by the token budget rather than a stop sequence (`finish_reason: length`)."""
    requests, retried = int(health.get("requests", 0)), int(health.get("retried", 0))
    generations = int(health.get("generations", 0))

    def share(count: str) -> float:
        return min(1.0, int(health.get(count, 0)) / generations) if generations else 0.0

    return [
        _fraction(
            "retried",
            retried / requests if requests else 0.0,
            requests,
            settings.retried_fraction,
            "requests needed a retry",
            unit="requests",
        ),
        _fraction(
            "cut_in_reasoning",
            share("cut_in_reasoning"),
            generations,
            settings.truncated_fraction,
            "generations never reached the end of their reasoning (think_end_token)",
            unit="generations",
        ),
        _fraction(
            "cut_by_length",
            share("cut_by_length"),
            generations,
            settings.cut_by_length_fraction,
            "generations stopped at the token budget, not at a stop sequence",
            unit="generations",
        ),
    ]


def binomial_lower_tail(k: int, n: int, p: float) -> float:
    """P(X ≤ k) for X ~ Binomial(n, p), summed exactly in log space."""
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 1.0 if k >= n else 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    terms = [
        math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q
        for i in range(0, min(k, n) + 1)
    ]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(term - top) for term in terms))
