"""Per-document evidence for the sentinels, from a run's requests or from a samples JSONL.

Two sources, one record (`sentinels.DocEvidence`): a live run reads each document's raw
and filtered responses as scoring sees them; `assay check` reads the same facts from the
samples lines lm-eval (or Assay with --log_samples) wrote, one line per document and filter,
where a log-likelihood may be written as a string ("-4.5", "False").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from assay.runner.scoring.sentinels import DocEvidence

INVALID = "[invalid]"
"""lm-eval's fallback where a regex or extraction filter found no match."""

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def multiple_choice(logprobs: Sequence[Any], metrics: Mapping[str, Any]) -> DocEvidence:
    """A multiple-choice document: each request's log-likelihood, and its `acc`."""
    values = tuple(_number(value) for value in logprobs)
    # acc_mutual_info sends each choice twice (with and without its context)
    n_choices = len(values) // 2 if "acc_mutual_info" in metrics and len(values) % 2 == 0 else len(values)
    correct = metrics.get("acc")
    return DocEvidence(
        choice_logprobs=values[:n_choices],
        n_choices=n_choices,
        correct=float(correct) if isinstance(correct, (int, float)) and not isinstance(correct, bool) else None,
    )


def generation(raw: Any, filtered: Sequence[Any]) -> DocEvidence:
    """A generated answer (the first, with repeats) and what each filter pipeline made of it."""
    text = _first(raw)
    text = "" if text is None else str(text)
    opened = text.rfind(THINK_OPEN)
    return DocEvidence(
        answer_empty=not text.strip(),
        answer_unparsed=tuple(_first(value) == INVALID for value in filtered),
        answer_truncated=opened >= 0 and THINK_CLOSE not in text[opened:],
    )


def from_samples(output_type: str, lines: Sequence[Mapping[str, Any]]) -> list[DocEvidence]:
    """Each document's evidence from its samples lines (one per filter, in any order)."""
    by_doc: dict[Any, list[Mapping[str, Any]]] = {}
    for line in lines:
        by_doc.setdefault(_doc_key(line), []).append(line)
    evidence: list[DocEvidence] = []
    for doc_lines in by_doc.values():
        first = doc_lines[0]
        resps = first.get("resps")
        if not isinstance(resps, list):
            continue
        if output_type == "multiple_choice":
            logprobs = [_first(_first(resp)) for resp in resps]
            if all(value is not None for value in logprobs):
                evidence.append(multiple_choice(logprobs, first))
        elif output_type == "generate_until" and resps:
            filtered = [_first(line.get("filtered_resps")) for line in doc_lines]
            evidence.append(generation(_first(resps[0]), filtered))
    return evidence


def _doc_key(line: Mapping[str, Any]) -> Any:
    doc_id = line.get("doc_id")
    return doc_id if isinstance(doc_id, (int, str)) else id(line)


def _first(value: Any) -> Any:
    """The first element of a list (a repeat, a request, a (logprob, greedy) pair), else the value."""
    if isinstance(value, (list, tuple)):
        return value[0] if value else None
    return value


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")
