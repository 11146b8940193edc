"""`assay results`: lm-eval's results table, rebuilt from an Evaluation's status.

The runner condenses lm-eval's results dict into status (`runner.results.condensed`): per
task and group, each `metric,filter` with its value and stderr; sample counts; versions.
`results_dict` turns that back into lm-eval's shape (`"acc,none"`, `"acc_stderr,none"`,
"N/A" for a stderr that was not computed) and the runner's own `table.make_table` prints
it, so the table reads as the run's log printed it. What status does not keep is left
out, not guessed: the n-shot column and the ↑/↓ arrows are blank, tasks are listed by name
(no aliases, no indentation under their group), and a row whose lm-eval entry had no
stderr key at all shows "N/A" (status cannot tell it from a stderr not computed). Values
come back as floats: the runner stores every value as one, and the API server returns
`1.0` as `1`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from assay import echoed_text, scores
from assay.cli_cluster import baseline_rows, listing
from assay.run_results import RunResults
from assay.runner.results import table
from assay.spec import status as schema


def results_dict(status: Mapping[str, Any]) -> dict[str, Any]:
    """lm-eval's results dict as far as status holds it: results, groups, versions, n-samples."""
    out: dict[str, Any] = {"results": _rows(schema.metric_tables(status, schema.RESULTS))}
    groups = _rows(schema.metric_tables(status, schema.GROUPS))
    if groups:  # as in lm-eval's dict: the key only when some group aggregates
        out["groups"] = groups
    out["versions"] = {str(name): str(version) for name, version in (status.get("versions") or {}).items()}
    out["n-samples"] = {name: dict(counts) for name, counts in schema.sample_counts(status).items()}
    if schema.trusted(status) is False:
        out["sentinels"] = _untrusted(schema.sentinel_failures(status))
    return out


def _untrusted(failures: list[schema.SentinelFailure]) -> dict[str, Any]:
    """status.sentinels' failures as the results JSON's block, so the table marks those tasks as the run did."""
    tasks: dict[str, Any] = {}
    for failure in failures:
        checks = tasks.setdefault(failure.get("task", ""), {"trusted": False, "checks": {}})["checks"]
        checks[f"check {len(checks) + 1}"] = {"passed": False, "reason": failure.get("reason", "")}
    return {"trusted": False, "tasks": tasks}


def _rows(tables: schema.MetricTable) -> dict[str, dict[str, Any]]:
    rows = {}
    for name, metrics in tables.items():
        values = [
            scores.MetricValue(*scores.split_key(key), entry.get("value"), entry.get("stderr"))
            for key, entry in metrics.items()
        ]
        rows[name] = scores.row_entries(values)
    return rows


def render(evaluation: Mapping[str, Any], fmt: str) -> str:
    """The results (and the comparison with the baseline) in `fmt`: table, json or markdown."""
    status = schema.of(evaluation)
    results = results_dict(status)
    comparison = status.get("comparison") if isinstance(status.get("comparison"), Mapping) else None
    if fmt == "json":
        shown = {**results, **({"comparison": comparison} if comparison is not None else {})}
        return json.dumps(shown, indent=2, ensure_ascii=False) + "\n"
    markdown = fmt == "markdown"
    # As `assay run` prints: a line about the run, then each table followed by a blank line.
    text = _heading(evaluation, markdown=markdown) + tables(results)
    if comparison is not None:
        text += baseline_rows.render(comparison, markdown=markdown)
    return text


def tables(results: Mapping[str, Any]) -> str:
    """The tables as `assay run` prints them: tasks, then groups when some group aggregates
    (each `print`ed, so a blank line follows each)."""
    run = RunResults.from_lmeval_dict(results)
    out = table.make_table(run) + "\n"
    if "groups" in results:
        out += table.make_table(run, "groups") + "\n"
    return out


def _heading(evaluation: Mapping[str, Any], *, markdown: bool) -> str:
    meta, status = evaluation.get("metadata") or {}, schema.of(evaluation)
    line = f"{meta.get('namespace')}/{meta.get('name')} ({listing.model_name(evaluation)}): {status.get('phase') or 'Pending'}."
    # The runner's note on its results ("Evaluated 3 tasks.", or that they were truncated to fit status).
    note = echoed_text.bounded(str(status.get("runnerMessage") or ""), 1024)
    if markdown:
        return f"### {echoed_text.bounded(line, 1024)}\n\n" + (f"{note}\n\n" if note else "")
    return echoed_text.bounded(f"{line} {note}".strip(), 2048) + "\n"
