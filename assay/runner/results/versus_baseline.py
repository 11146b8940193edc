"""This run against its `spec.baseline`: rank 0, after scoring, before the scores go to status.

The baseline is a results folder on this run's output volume: named by path, or by an
Evaluation of the namespace whose last run succeeded (its `status.outputDir`). A runner may
read no Evaluation: the operator reads that one when it decides the run and gives the Job
what it showed then (ASSAY_BASELINE_EVALUATION: its phase, output volume and results folder). Its documents'
scores are its `scores_` files (every runner Job writes them) or its samples; this run's
are still in memory. The statistics are `assay compare`'s, with `spec.gate` as its flags.

The comparison never costs the run its scores: a baseline that is missing, not finished,
on another volume or unreadable, and a comparison that fails in any way (a missing extra,
a bootstrap that overflows), becomes `status.comparison.error`, one sentence, and the
operator's condition Regressed is Unknown; the scores are written with it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from assay import echoed_text
from assay import spec as spec_module
from assay.compare import comparison, failures, outputs, verdicts
from assay.kube import api_errors
from assay.run_options import EvalOptions
from assay.run_results import RunResults
from assay.runner.results import stopped_early
from assay.spec import ENV_OUTPUT_ROOT, Evaluation
from assay.spec import status as schema

log = logging.getLogger("assay.runner")

MAX_ROWS = 50
"""Rows kept in status, worst first: the whole comparison is in the log and `assay compare`'s output."""
MAX_NOTES = 10
MESSAGE_CHARS = 1024
NOTE_CHARS = 512
DEFAULT_OUTPUT_ROOT = "/output"
_WORST_FIRST = {
    verdicts.REGRESSED: 0,
    verdicts.INCONCLUSIVE: 1,
    verdicts.UNCHANGED: 2,
    verdicts.EQUIVALENT: 3,
    verdicts.IMPROVED: 4,
}


class BaselineUnavailable(Exception):
    """One sentence on why the baseline cannot be compared with."""


def status_of(
    spec: Evaluation, results: RunResults, records: Mapping[str, Any], *, sink: Any, output_root: str | None
) -> schema.Comparison | None:
    """`status.comparison` for this run, or None without a baseline."""
    if spec.baseline is None:
        return None
    status = _status_of(spec, results, records, sink=sink, output_root=output_root)
    sequential = stopped_early.status_block(results)
    return status if sequential is None else {**status, "sequential": sequential}


def _status_of(
    spec: Evaluation, results: RunResults, records: Mapping[str, Any], *, sink: Any, output_root: str | None
) -> schema.Comparison:
    assert spec.baseline is not None
    label = spec.baseline.label
    try:
        folder = locate(
            spec,
            read_evaluation=decided_view(os.environ) or getattr(sink, "read_evaluation", None),
            output_root=Path(output_root or DEFAULT_OUTPUT_ROOT),
        )
        baseline = outputs.read_run(folder, label=f"the baseline {label}")
        candidate = outputs.run_in_memory(results, records, label="this run")
        settings = comparison.Settings(
            alpha=spec.gate.alpha,
            iterations=spec.gate.iterations,
            margin=spec.gate.equivalence_margin,
            tolerances=tuple(verdicts.parse_max_drop(flag) for flag in spec.gate.max_drop_flags()),
        )
        status = as_status(comparison.compare_runs(baseline, candidate, settings), label=label, strict=spec.gate.strict)
    except BaselineUnavailable as error:
        log.warning("no comparison with the baseline %s: %s", label, error)
        return {"baseline": label, "error": echoed_text.bounded(str(error), MESSAGE_CHARS)}
    except Exception as error:
        note = failures.sentence(error, runs=f"This run and the baseline {label}")
        log.warning("%s", note, exc_info=True)  # the pod's log keeps the traceback for whoever debugs it
        return {"baseline": label, "error": echoed_text.bounded(note, MESSAGE_CHARS)}
    log.info("against the baseline %s: %s", label, status["message"])
    return status


def decided_view(env: Mapping[str, str]) -> Callable[[str], Mapping[str, Any]] | None:
    """The baseline Evaluation as the operator saw it when it decided this run, or None where it
    gave none (a Job of an older operator: the sink reads it, as that runner's Role allows)."""
    raw = env.get(spec_module.ENV_BASELINE_EVALUATION)
    if raw is None:
        return None
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = None

    def read(name: str) -> Mapping[str, Any]:
        if not isinstance(body, Mapping) or (body.get("metadata") or {}).get("name") != name:
            # As the API server would answer a read: the operator found no such Evaluation.
            raise api_errors.ApiError(code=404, reason=api_errors.NOT_FOUND, message=f"{name!r} not found")
        return body

    return read


def with_folder(spec: Evaluation, options: EvalOptions, *, sink: Any, output_root: str | None) -> EvalOptions:
    """A sequential run's options with the baseline's results folder, found before the first chunk
    (rank 0); where it cannot be found every document is scored, and the comparison afterwards says why."""
    assert options.sequential is not None
    root = Path(output_root or os.environ.get(ENV_OUTPUT_ROOT) or DEFAULT_OUTPUT_ROOT)
    try:
        reader = decided_view(os.environ) or getattr(sink, "read_evaluation", None)
        folder = locate(spec, read_evaluation=reader, output_root=root)
    except BaselineUnavailable as error:
        log.warning("the sequential gate has no baseline (%s); every document is scored", error)
        return options
    return dataclasses.replace(options, sequential=dataclasses.replace(options.sequential, baseline=os.fspath(folder)))


def locate(spec: Evaluation, *, read_evaluation: Callable[[str], Mapping[str, Any]] | None, output_root: Path) -> Path:
    """The baseline's results folder (or file) under this run's output volume."""
    assert spec.baseline is not None
    if spec.baseline.path is not None:
        return _existing(output_root / spec.baseline.path, f"spec.baseline.path {spec.baseline.path}")
    name = str(spec.baseline.evaluation)
    if read_evaluation is None:
        raise BaselineUnavailable(
            f"The baseline Evaluation {name} can be read only on a cluster; "
            "give spec.baseline.path (its results folder) instead."
        )
    try:
        body = read_evaluation(name)
    except Exception as error:
        missing = isinstance(error, api_errors.ApiError) and error.reason == api_errors.NOT_FOUND
        why = "it does not exist" if missing else f"reading it failed ({_first_line(error)})"
        raise BaselineUnavailable(f"The baseline Evaluation {name} cannot be used: {why}.") from None
    return _folder_of(name, body, spec, output_root)


def _folder_of(name: str, body: Mapping[str, Any], spec: Evaluation, output_root: Path) -> Path:
    status, their_spec = body.get("status") or {}, body.get("spec") or {}
    phase = status.get("phase") or "not yet accepted"
    if phase != "Succeeded":
        raise BaselineUnavailable(
            f"The baseline Evaluation {name} has not succeeded (it is {phase}); "
            "compare again with a re-run once it has."
        )
    theirs = (their_spec.get("output") or {}).get("pvc")
    if not theirs:
        raise BaselineUnavailable(
            f"The baseline Evaluation {name} wrote its results to an emptyDir, gone with its pod; "
            "give it spec.output.pvc and re-run it."
        )
    if theirs != spec.output.pvc:
        raise BaselineUnavailable(
            f"The baseline Evaluation {name} writes to the volume {theirs}, this one to "
            f"{spec.output.pvc or 'an emptyDir'}; set the same spec.output.pvc on both."
        )
    written = str(status.get("outputDir") or "")
    relative = written.removeprefix(DEFAULT_OUTPUT_ROOT).strip("/")
    if not relative or ".." in relative.split("/"):
        raise BaselineUnavailable(f"The baseline Evaluation {name} names no results folder in its status.")
    return _existing(output_root / relative, f"The baseline Evaluation {name}'s results folder {written}")


def _existing(path: Path, what: str) -> Path:
    if not path.exists():
        raise BaselineUnavailable(f"{what} does not exist on this run's output volume.")
    return path


def _first_line(error: Exception) -> str:
    if isinstance(error, api_errors.ApiError):
        return f"HTTP {error.code} {error.reason}".rstrip()
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def as_status(result: comparison.Comparison, *, label: str, strict: bool) -> schema.Comparison:
    """The comparison as status holds it: the verdict, one sentence, the rows worst first."""
    rows = sorted(result.rows, key=_badness)
    status: schema.Comparison = {
        "baseline": label,
        "baselineRun": os.fspath(result.baseline),
        "verdict": result.verdict,
        "message": echoed_text.bounded(_sentence(result, rows, label=label, strict=strict), MESSAGE_CHARS),
        "rows": [_row(row) for row in rows[:MAX_ROWS]],
        "rowsOmitted": max(0, len(rows) - MAX_ROWS),
    }
    notes = [*(f"Doubt: {doubt}" for doubt in result.doubts), *result.notes]
    if notes:
        status["notes"] = [echoed_text.bounded(note, NOTE_CHARS) for note in notes[:MAX_NOTES]]
    return status


def _gain(row: comparison.Row) -> float:
    delta = row.result.delta
    return (delta if row.higher_is_better else -delta) if math.isfinite(delta) else 0.0


def _badness(row: comparison.Row) -> tuple[int, float]:
    return _WORST_FIRST.get(row.verdict, 5), _gain(row)


def _row(row: comparison.Row) -> schema.ComparisonRow:
    test, number = row.result, schema.finite_number
    return {
        "task": row.task,
        "metric": row.metric,
        "filter": row.filter,
        "n": test.n,
        "baseline": number(test.baseline),
        "candidate": number(test.candidate),
        "delta": number(test.delta),
        "ciLow": number(test.ci_low),
        "ciHigh": number(test.ci_high),
        "pValue": number(row.p_holm),
        "mde": number(test.mde),
        "test": test.test,
        "verdict": row.verdict,
    }


def _sentence(result: comparison.Comparison, rows: list[comparison.Row], *, label: str, strict: bool) -> str:
    worst = rows[0]
    where = (
        f"{worst.task} {worst.metric} {worst.result.delta:+.4f} "
        f"[{worst.result.ci_low:+.4f}, {worst.result.ci_high:+.4f}], Holm p = {worst.p_holm:.3g}"
    )
    count = f"{len(rows)} metric{'s' if len(rows) != 1 else ''}"
    if result.verdict == verdicts.REGRESSED:
        return f"Regressed against {label}: {where}."
    if result.verdict == verdicts.INCONCLUSIVE:
        gate = " (the gate is strict: this fails it)" if strict else ""
        if result.doubts:
            return f"Inconclusive against {label}{gate}: {result.doubts[0]}"
        return (
            f"Inconclusive against {label}{gate}: too few documents to rule out a drop beyond the tolerance; "
            f"worst {where}, MDE {worst.result.mde:.4f}."
        )
    return f"No regression against {label} over {count} ({result.verdict}); worst {where}."
