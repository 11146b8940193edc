"""`assay get`: Evaluations as `kubectl get evals` would list them, or as kubectl's JSON.

The columns are the CRD's printer columns (Model, Tasks, Phase, Reason, Progress, Regressed,
Age; Message with `-o wide`), except that Regressed carries the verdict beside the
condition's status ("False (equivalent)"), which a printer column cannot join, and Progress
a running run's ETA, which the runner does not write (`progress_eta`). Text the
cluster holds (a message a runner or a model server wrote) is shown as one bounded line.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from typing import Any

from assay import echoed_text
from assay.cli_cluster import ages, columns
from assay.operator.decide import progress_eta, regression
from assay.spec import status as schema

HEADERS = ("NAME", "MODEL", "TASKS", "PHASE", "REASON", "PROGRESS", "REGRESSED", "AGE")
CELL_CHARS = 300
"""Bound on a cell holding text from the cluster (a message, a model's name)."""


def table(
    evaluations: Sequence[Mapping[str, Any]],
    *,
    now: datetime.datetime,
    all_namespaces: bool = False,
    wide: bool = False,
) -> str:
    headers = [*(["NAMESPACE"] if all_namespaces else []), *HEADERS, *(["MESSAGE"] if wide else [])]
    rows = []
    for evaluation in evaluations:
        meta, status = evaluation.get("metadata") or {}, schema.of(evaluation)
        cells = [
            str(meta.get("name", "")),
            model_name(evaluation),
            ",".join(map(str, (evaluation.get("spec") or {}).get("tasks") or ())),
            str(status.get("phase") or ""),
            str(status.get("reason") or ""),
            progress_eta.summary(status, now=now),
            regressed(status),
            ages.since(meta.get("creationTimestamp"), now=now),
        ]
        if all_namespaces:
            cells.insert(0, str(meta.get("namespace", "")))
        if wide:
            cells.append(str(status.get("message") or ""))
        rows.append([echoed_text.bounded(cell, CELL_CHARS) for cell in cells])
    return columns.render(headers, rows)


def model_name(evaluation: Mapping[str, Any]) -> str:
    """The Model column: what the operator put in status, else the checkpoint the spec names, else the backend."""
    spec = evaluation.get("spec") or {}
    named = schema.of(evaluation).get("model") or (spec.get("modelArgs") or {}).get("pretrained")
    return str(named or spec.get("model") or "")


def regression_condition(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return next((c for c in status.get("conditions") or () if c.get("type") == regression.REGRESSED), None)


def regressed(status: Mapping[str, Any]) -> str:
    """ "True (regressed)", "False (equivalent)", "Unknown (BaselineUnavailable)"; "" without a baseline."""
    condition = regression_condition(status)
    verdict = str((status.get("comparison") or {}).get("verdict") or "")
    if condition is None:
        return verdict  # the runner wrote its comparison; the operator has not read it yet
    why = verdict or (str(condition.get("reason") or "") if condition.get("status") == "Unknown" else "")
    return f"{condition.get('status')} ({why})" if why else str(condition.get("status"))


def as_json(evaluations: Sequence[Mapping[str, Any]], *, single: bool) -> str:
    """One Evaluation as its object, several as a List, as `kubectl get -o json` prints them."""
    if single:
        return json.dumps(evaluations[0], indent=4, ensure_ascii=False)
    listed = {"apiVersion": "v1", "items": list(evaluations), "kind": "List", "metadata": {"resourceVersion": ""}}
    return json.dumps(listed, indent=4, ensure_ascii=False)
