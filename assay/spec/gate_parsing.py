"""Parsing `spec.baseline` and `spec.gate` (the records and their meaning: `assay.spec.gate`)."""

from __future__ import annotations

import math

from assay.errors import UserError
from assay.spec.gate import (
    DEFAULT_ALPHA,
    DEFAULT_ITERATIONS,
    MAX_DROP_FOR_ENTRIES,
    MAX_ITERATIONS,
    PATH_MAX,
    TARGET_MAX,
    Baseline,
    Gate,
    StopAt,
)
from assay.spec.reader import Reader


def parse_baseline(r: Reader) -> Baseline | None:
    data = r.mapping("baseline")
    if data is None:
        return None
    sub = Reader(data, "spec.baseline", {"evaluation", "path"})
    evaluation = sub.object_name("evaluation")
    path = sub.string("path", max_length=PATH_MAX)
    if (evaluation is None) == (path is None):
        raise UserError(
            "spec.baseline needs exactly one of evaluation (an Evaluation in this namespace) and path "
            "(a results folder on the output volume)."
        )
    if path is not None and (path.startswith("/") or ".." in path.split("/")):
        raise UserError(
            f"spec.baseline.path must be a relative path inside the output volume without '..', not {path!r}."
        )
    return Baseline(evaluation=evaluation, path=path)


def parse_gate(r: Reader, *, has_baseline: bool) -> Gate:
    data = r.mapping("gate")
    if data is None:
        return Gate()
    if not has_baseline:
        raise UserError("spec.gate needs spec.baseline: name the run to compare with.")
    sub = Reader(
        data, "spec.gate", {"maxDrop", "maxDropFor", "alpha", "equivalenceMargin", "strict", "iterations", "sequential"}
    )
    alpha = _number(sub, "alpha", DEFAULT_ALPHA)
    if not 0 < alpha < 0.5:
        raise UserError(f"spec.gate.alpha must be between 0 and 0.5 (exclusive), not {alpha}.")
    margin = sub.get("equivalenceMargin")
    iterations = sub.integer("iterations", DEFAULT_ITERATIONS, minimum=1) or DEFAULT_ITERATIONS
    if iterations > MAX_ITERATIONS:
        raise UserError(f"spec.gate.iterations must be at most {MAX_ITERATIONS:,}, not {iterations:,}.")
    return Gate(
        max_drop=_non_negative(sub, "maxDrop"),
        max_drop_for=_max_drop_for(sub),
        alpha=alpha,
        equivalence_margin=None if margin is None else _non_negative(sub, "equivalenceMargin"),
        strict=bool(sub.boolean("strict", False)),
        iterations=iterations,
        sequential=bool(sub.boolean("sequential", False)),
    )


def parse_stop_at(r: Reader) -> StopAt | None:
    data = r.mapping("stopAt")
    if data is None:
        return None
    sub = Reader(data, "spec.stopAt", {"ciHalfWidth"})
    value = sub.get("ciHalfWidth")
    if not _is_number(value) or not 0 < float(value) < 1:
        raise UserError(f"spec.stopAt.ciHalfWidth must be a half-width above 0 and below 1, not {value!r}.")
    return StopAt(ci_half_width=float(value))


def _max_drop_for(r: Reader) -> dict[str, float]:
    data = r.mapping("maxDropFor", max_entries=MAX_DROP_FOR_ENTRIES) or {}
    tolerances = {}
    for target, value in data.items():
        task, _, metric = str(target).partition(":")
        if not task or len(target) > TARGET_MAX or "=" in target or ":" in metric:
            raise UserError(f"spec.gate.maxDropFor key {target!r} must be TASK or TASK:METRIC (TASK may be a glob).")
        if not _is_number(value) or not float(value) >= 0:
            raise UserError(f"spec.gate.maxDropFor[{target!r}] must be a number of 0 or more, not {value!r}.")
        tolerances[str(target)] = float(value)
    return tolerances


def _number(r: Reader, key: str, default: float) -> float:
    value = r.get(key)
    if value is None:
        return default
    if not _is_number(value) or not math.isfinite(float(value)):
        raise UserError(f"{r.where(key)} must be a number, not {value!r}.")
    return float(value)


def _non_negative(r: Reader, key: str) -> float:
    value = _number(r, key, 0.0)
    if value < 0:
        raise UserError(f"{r.where(key)} must be 0 or more, not {value}.")
    return value


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
