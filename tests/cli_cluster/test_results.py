"""`assay results`: lm-eval's table rebuilt from status equals the table the runner printed.

The results are a real lm-eval run's (tests/compare/runs), condensed into status by the
runner's own `condense_results`, served over HTTP and read back by `assay results`; the
expected text is the runner's own `make_table`. Status keeps no n-shot, higher-is-better,
alias or group hierarchy, so the expectation is the table of the same dict without them:
that is what `assay results` promises (see `results_view`), and all it can know.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from assay.run_results import RunResults
from assay.runner.results.condensed import condense_results
from assay.runner.results.table import make_table
from tests.cli_cluster.conftest import ClusterCli

RUN = (
    Path(__file__).resolve().parents[1]
    / "compare"
    / "runs"
    / "lmeval_seed7"
    / "x93knyaq"
    / "results_2026-12-02T18-58-43.427839.json"
)
NOT_IN_STATUS = ("n-shot", "higher_is_better", "group_subtasks")
"""What the runner does not condense into status; the table shows these columns blank."""


def _lm_eval_results() -> dict[str, Any]:
    return dict(json.loads(RUN.read_text()))


def _with_a_group(results: dict[str, Any]) -> dict[str, Any]:
    """The run as if its tasks were one group's, aggregated (as lm-eval lists a group: in results and in groups)."""
    group = {"alias": "p_suite", "acc,none": 0.1375, "acc_stderr,none": 0.0412, "sample_count": 80}
    return {
        **results,
        "results": {**results["results"], "p_suite": dict(group)},
        "groups": {"p_suite": dict(group)},
        "versions": {**results["versions"], "p_suite": 2},
    }


def _status_of(results: dict[str, Any], phase: str = "Succeeded") -> dict[str, Any]:
    condensed = condense_results(RunResults.from_lmeval_dict(results))
    return {
        "phase": phase,
        "reason": "JobComplete",
        "model": "pythia-14m",
        **condensed,
        "runnerMessage": condensed["message"],
    }


def _as_runner_printed(results: dict[str, Any]) -> str:
    """What `assay run` printed (each table `print`ed), from what status keeps."""
    kept = {k: v for k, v in results.items() if k not in NOT_IN_STATUS}
    run = RunResults.from_lmeval_dict(kept)
    return make_table(run) + "\n" + (make_table(run, "groups") + "\n" if "groups" in kept else "")


@pytest.mark.parametrize(
    "results", [_lm_eval_results(), _with_a_group(_lm_eval_results())], ids=["tasks", "with-a-group"]
)
def test_the_table_is_the_runners_for_the_same_results(kube: ClusterCli, results: dict[str, Any]) -> None:
    kube.evaluation("ev", status=_status_of(results))
    code, out, err = kube.run("results", "ev")
    assert code == 0 and err == ""
    heading, table = out.split("\n", 1)
    assert heading == f"team/ev (pythia-14m): Succeeded. Evaluated {len(results['results'])} tasks."
    assert table == _as_runner_printed(results)
    # The real run's rows, with lm-eval's quirks (a stderr of 0.0 prints as "0"); no n-shot, no arrow.
    assert "|p_arc    |      1|none  |      |acc            |   |0.2750|±  |0.0715|\n" in table
    assert "|p_lambada|Yaml   |none  |      |acc            |   |0.0000|±  |     0|\n" in table


def test_values_the_api_server_turned_into_integers_print_as_the_runner_printed_them(kube: ClusterCli) -> None:
    results = {
        "results": {
            "t": {"alias": "t", "acc,none": 1.0, "acc_stderr,none": 0.0, "f1,none": 0.5, "f1_stderr,none": "N/A"}
        },
        "versions": {"t": 1},
        "n-samples": {"t": {"original": 4, "effective": 2}},
    }
    status = _status_of(results)
    status["results"]["t"]["acc,none"] = {"value": 1, "stderr": 0}  # kube-apiserver returns 1.0 as 1
    kube.evaluation("ev", status=status)
    assert kube.run("results", "ev")[1].split("\n", 1)[1] == _as_runner_printed(results)


def test_json_is_lm_evals_results_shape_as_far_as_status_holds_it(kube: ClusterCli) -> None:
    results = _with_a_group(_lm_eval_results())
    kube.evaluation("ev", status=_status_of(results))
    code, out, _ = kube.run("results", "ev", "--format", "json")
    shown = json.loads(out)
    assert code == 0 and set(shown) == {"results", "groups", "versions", "n-samples"}
    unshown = ("alias", "name", "sample_len", "sample_count")
    assert shown["results"] == {
        task: {k: v for k, v in row.items() if k not in unshown} for task, row in results["results"].items()
    }
    assert shown["results"]["p_rolling"]["word_perplexity_stderr,none"] == "N/A"
    assert shown["groups"] == {"p_suite": {"acc,none": 0.1375, "acc_stderr,none": 0.0412}}
    assert shown["versions"] == {name: str(version) for name, version in results["versions"].items()}
    assert shown["n-samples"] == results["n-samples"]


COMPARISON = {
    "baseline": "base",
    "baselineRun": "/output/team/base/results.json",
    "verdict": "regressed",
    "message": "Regressed against base: p_arc acc -0.1000 [-0.1800, -0.0200], Holm p = 0.012.",
    "rows": [
        {
            "task": "p_arc",
            "metric": "acc",
            "filter": "none",
            "n": 40,
            "baseline": 0.375,
            "candidate": 0.275,
            "delta": -0.1,
            "ciLow": -0.18,
            "ciHigh": -0.02,
            "pValue": 0.012,
            "mde": 0.06,
            "test": "mcnemar",
            "verdict": "regressed",
        },
        {
            "task": "p_lambada",
            "metric": "perplexity",
            "filter": "none",
            "n": 40,
            "baseline": 1.5,
            "candidate": 1.497,
            "delta": -0.003,
            "ciLow": None,
            "ciHigh": None,
            "pValue": None,
            "mde": None,
            "test": "paired-t",
            "verdict": "unchanged",
        },
    ],
    "rowsOmitted": 3,
    "notes": ["The runs used different prompts for p_arc."],
}


def test_the_comparison_with_the_baseline_follows_the_tables(kube: ClusterCli) -> None:
    results = _lm_eval_results()
    kube.evaluation("ev", status={**_status_of(results), "comparison": COMPARISON})
    printed = _as_runner_printed(results)
    after_heading = kube.run("results", "ev")[1].split("\n", 1)[1]
    assert after_heading.startswith(printed)
    lines = after_heading[len(printed) :].splitlines()
    assert lines[0] == "Against the baseline base: regressed"
    assert lines[1] == COMPARISON["message"]
    assert [c.strip() for c in lines[3].split("|")[1:-1]] == [
        "Tasks",
        "Filter",
        "Metric",
        "n",
        "Baseline",
        "Candidate",
        "Delta",
        "CI",
        "p (Holm)",
        "Test",
        "Verdict",
    ]
    assert [c.strip() for c in lines[5].split("|")[1:-1]] == [
        "p_arc",
        "none",
        "acc",
        "40",
        "0.3750",
        "0.2750",
        "-0.1000",
        "[-0.1800, -0.0200]",
        "0.0120",
        "mcnemar",
        "regressed",
    ]
    assert [c.strip() for c in lines[6].split("|")[1:-1]][6:9] == ["-0.0030", "N/A", "N/A"]
    assert lines[7:] == [
        "",
        "(3 more compared metrics left out of status; the runner's log and its output volume have them all.)",
        "The runs used different prompts for p_arc.",
    ]
    shown = json.loads(kube.run("results", "ev", "--format", "json")[1])
    assert shown["comparison"] == COMPARISON


def test_markdown_has_a_heading_the_tables_and_the_comparison(kube: ClusterCli) -> None:
    results = _lm_eval_results()
    kube.evaluation(
        "ev",
        status={
            **_status_of(results),
            "comparison": {"baseline": "base", "error": "The baseline base has not succeeded."},
        },
    )
    out = kube.run("results", "ev", "--format", "markdown")[1]
    assert out.startswith("### team/ev (pythia-14m): Succeeded.\n\nEvaluated 3 tasks.\n\n")
    assert _as_runner_printed(results) in out
    assert out.endswith("No comparison with the baseline base: The baseline base has not succeeded.\n")


def test_no_results_yet_is_one_sentence(kube: ClusterCli) -> None:
    kube.evaluation("ev", status={"phase": "Running", "progress": {"summary": "12/40 (30%)"}})
    assert kube.run("results", "ev") == (
        1,
        "",
        'assay: error: Evaluation "ev" has no results in its status yet (phase Running: 12/40 (30%)).\n',
    )


def test_untrusted_tasks_are_marked_with_the_reason_as_the_run_printed_them(kube: ClusterCli) -> None:
    results = _lm_eval_results()
    reason = "100% of 40 documents scored every choice alike: the log-likelihoods do not discriminate"
    checks = {"degenerate": {"passed": False, "reason": reason}}
    results["sentinels"] = {"trusted": False, "tasks": {"p_arc": {"trusted": False, "checks": checks}}}
    kube.evaluation("ev", status=_status_of(results))
    code, out, _ = kube.run("results", "ev")
    assert code == 0
    assert "|p_arc ⚠  |" in out and f"⚠ p_arc: {reason}.\n" in out
    assert out.split("\n", 1)[1] == _as_runner_printed(results)  # the same marks and notes as the run's table
